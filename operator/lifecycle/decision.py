"""What one lifecycle step returns: the next status, the actions on the workload, the Events."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from ..api.status import LongContextJobStatus
from ..layout import ResolvedLayout
from ..reasons import Reason

BROKEN_GANG_GRACE_SECONDS = 5  # SIGTERM to SIGKILL for the pods of a gang that failed or hung
DELETE_WAIT_SECONDS = 1.0  # the next look at a workload being created or deleted


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: Reason
    message: str


@dataclass(frozen=True)
class CreateWorkload:
    """Create-or-get the Service, ConfigMap and Indexed Job of `generation`."""

    generation: int
    layout: ResolvedLayout


@dataclass(frozen=True)
class DeleteWorkload:
    """Delete the Job of `generation` and its pods (foreground propagation): only the Job with
    `uid`, one this job created and observed (never another object that has its name)."""

    generation: int
    uid: str
    lost_pods: tuple[str, ...] = ()
    """Its pods on a lost node whose graceful deletion is overdue (observe.LostPod), deleted with no
    grace period: no kubelet will confirm their end, and the foreground delete would wait forever."""
    broken: bool = False
    """The gang cannot finish a step (a rank failed or hung, or the gang never started): its pods
    are stopped within BROKEN_GANG_GRACE_SECONDS rather than their grace period, which is sized for
    a preempted gang to finish its step and save; a broken gang would only wait it out."""


@dataclass(frozen=True)
class Decision:
    status: LongContextJobStatus
    actions: tuple[CreateWorkload | DeleteWorkload, ...] = ()
    events: tuple[Event, ...] = ()
    requeue_after: float | None = None


def sooner(decision: Decision, seconds: float | None) -> Decision:
    """`decision`, requeued after `seconds` where that comes before its own requeue."""
    if seconds is None or (decision.requeue_after is not None and decision.requeue_after <= seconds):
        return decision
    return replace(decision, requeue_after=seconds)
