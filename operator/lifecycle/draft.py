"""The status being decided: typed field updates, conditions and the Events their transitions make."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TypedDict, Unpack

from .. import conditions
from ..api.status import (
    FAILED,
    Condition,
    LayoutStatus,
    LongContextJobStatus,
    Phase,
    ProgressStatus,
    RestartStatus,
    WorkersStatus,
)
from ..conditions import ConditionType
from ..observe import parse_time, timestamp
from ..reasons import Reason
from ..text import printable
from .decision import CreateWorkload, Decision, DeleteWorkload, Event

WARNING_WHEN_TRUE = (conditions.FAILED, conditions.RESTARTING)
WARNING_WHEN_FALSE = (
    conditions.ADMITTED,
    conditions.LAYOUT_PLANNED,
    conditions.WORKLOAD_CREATED,
    conditions.POD_ANNOTATIONS_ACCEPTED,
)


class StatusUpdate(TypedDict, total=False):
    """The status fields a lifecycle step sets (conditions go through Draft.condition)."""

    phase: Phase
    reason: Reason
    message: str
    layout: LayoutStatus
    workers: WorkersStatus | None
    restarts: int
    stall_restarts: int
    workload_generation: int
    current_workload: str | None
    start_time: str
    completion_time: str
    observed_generation: int
    progress: ProgressStatus
    last_restart: RestartStatus


@dataclass
class Draft:
    """The status being decided, with the actions and the events its condition transitions produce."""

    status: LongContextJobStatus
    now: datetime
    spec_generation: int
    events: list[Event] = field(default_factory=list)
    actions: list[CreateWorkload | DeleteWorkload] = field(default_factory=list)
    condition_events: list[Event] = field(default_factory=list)

    def set(self, **values: Unpack[StatusUpdate]) -> None:
        if values.get("message"):  # may quote pods, Kueue or the API server (text.py)
            values["message"] = printable(values["message"])
        self.status = self.status.model_copy(update=values)

    def _set_conditions(self, kept: list[Condition]) -> None:
        self.status = self.status.model_copy(update={"conditions": kept})

    def condition(self, kind: ConditionType, status: bool, reason: Reason, message: str = "") -> None:
        value = "True" if status else "False"
        message = printable(message)  # also the Event's message
        old = next((c for c in self.status.conditions if c.type == kind), None)
        if old and old.status == value and old.reason == reason and old.message == message:
            return
        changed = old is None or old.status != value
        new = Condition(
            type=kind,
            status=value,
            reason=reason,
            message=message or None,
            last_transition_time=timestamp(self.now) if changed else old.last_transition_time,
            observed_generation=self.spec_generation,
        )
        self._set_conditions([c for c in self.status.conditions if c.type != kind] + [new])
        if changed:
            warning = (status and kind in WARNING_WHEN_TRUE) or (not status and kind in WARNING_WHEN_FALSE)
            event = Event("Warning" if warning else "Normal", reason, message or f"{kind} {value}")
            # Conditions that change together for one reason (Running, Rendezvous and Succeeded
            # on completion) are one transition: one Event, the last condition's message.
            self.events = [
                e
                for e in self.events
                if (e.type, e.reason) != (event.type, event.reason) or e not in self.condition_events
            ]
            self.events.append(event)
            self.condition_events.append(event)

    def clear(self, kind: ConditionType, reason: Reason, message: str) -> None:
        """Sets `kind` False only where it is True now, so conditions never reached stay absent."""
        if self.holds(kind):
            self.condition(kind, False, reason, message)

    def restart_clock(self, kind: ConditionType) -> None:
        """Forgets `kind`, so setting it again records a new transition time and Event."""
        self._set_conditions([c for c in self.status.conditions if c.type != kind])

    def holds(self, kind: ConditionType) -> bool:
        """Whether condition `kind` is True now."""
        return any(c.type == kind and c.status == "True" for c in self.status.conditions)

    def has(self, kind: ConditionType) -> bool:
        """Whether condition `kind` was ever set (True or False)."""
        return any(c.type == kind for c in self.status.conditions)

    def condition_since(self, kind: ConditionType, status: str = "True") -> datetime | None:
        c = next((c for c in self.status.conditions if c.type == kind and c.status == status), None)
        return parse_time(c.last_transition_time) if c else None

    @property
    def checkpoint_step(self) -> int | None:
        """The last checkpoint seen, which the next start resumes from."""
        return self.status.progress.last_checkpoint_step if self.status.progress is not None else None

    def fail(self, reason: Reason, message: str) -> Decision:
        """The job ends Failed: terminal, decided no further."""
        self.set(phase=FAILED, reason=reason, message=message, completion_time=timestamp(self.now))
        self.clear(conditions.RUNNING, reason, message)
        self.condition(conditions.FAILED, True, reason, message)
        return self.decision()

    def decision(self, requeue_after: float | None = None) -> Decision:
        return Decision(self.status, tuple(self.actions), tuple(self.events), requeue_after)
