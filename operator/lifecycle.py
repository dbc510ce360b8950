"""The lifecycle of a LongContextJob as pure decisions.

`decide` takes the job's spec and status, what was observed of its current workload generation and
a way to ask builtin admission, and returns the next status, the actions to apply (create or delete
a generation) and one Kubernetes Event per condition transition. The handlers write the status
BEFORE applying the actions, which makes every step idempotent: a restarted operator finds the
generation it meant to create (or delete) in the status and does it again with create-or-get.

Phases: Pending (not admitted; the reason says why) -> Admitted (workload created) -> Starting
(some ranks Running) -> Running (all ranks Running) -> Succeeded. A failed rank or a startup
timeout -> Restarting (generation deleted, backoff) -> generation + 1, or Failed after
restartPolicy.maxRestarts. A Running gang that stops advancing (the watchdog's reads of every
rank, stall.py) -> Stalled and Restarting, counted in stallRestarts against
restartPolicy.maxStallRestarts. spec.suspend -> Suspended (workload deleted); unsuspending creates the
next generation, which resumes from the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from longctx_trainer.contract.config import DEFAULT_REMAT_POLICY

from . import conditions, names, preemption, reasons
from .admission import Admission
from .api.advice import advice
from .api.spec import (
    API_ATTENTION,
    API_LOAD_BALANCE,
    API_REMAT_POLICY,
    TRAINER_ATTENTION,
    TRAINER_LOAD_BALANCE,
    TRAINER_REMAT_POLICY,
    LongContextJobSpec,
)
from .api.status import Condition, LayoutStatus, LongContextJobStatus, WorkersStatus
from .conditions import ConditionType
from .layout import ResolvedLayout
from .observe import KueueVerdict, RankPreemption, WorkloadObservation, parse_time
from .planner import Plan, PlanError
from .reasons import Reason
from .resolve import resolve_layout, unplanned_attention
from .stall import GangHealth
from .text import printable

TERMINAL = ("Succeeded", "Failed")
DELETE_WAIT_SECONDS = 1.0
BROKEN_GANG_GRACE_SECONDS = 5  # SIGTERM to SIGKILL for the pods of a gang that failed or hung
ADMISSION_RETRY_SECONDS = 5.0
BACKOFF_FLOOR_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 600.0
WARNING_WHEN_TRUE = (conditions.FAILED, conditions.RESTARTING)
WARNING_WHEN_FALSE = (
    conditions.ADMITTED,
    conditions.LAYOUT_PLANNED,
    conditions.WORKLOAD_CREATED,
    conditions.POD_ANNOTATIONS_ACCEPTED,
)


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
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


def timestamp(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


UNPLANNED_EXPLANATION = "manual layout taken as written (gpuType cpu: the planner models GPUs only)"


def layout_status(spec: LongContextJobSpec, layout: ResolvedLayout, plan: Plan | None) -> LayoutStatus:
    return LayoutStatus(
        data=layout.data,
        context=layout.context,
        tensor=layout.tensor,
        processes_per_node=layout.processes_per_node,
        processes=spec.resources.nodes * layout.processes_per_node,
        offload=layout.offload,
        chunk_tokens=layout.chunk_tokens,
        attention=API_ATTENTION[layout.attention],
        ulysses=layout.ulysses if layout.attention == "hybrid" else None,
        load_balance=API_LOAD_BALANCE[layout.load_balance],
        remat_policy=API_REMAT_POLICY[layout.remat_policy],
        memory_per_gpu=f"{plan.memory.total / 2**30:.1f}Gi" if plan else None,
        estimated_tokens_per_second=round(plan.tokens_per_second, 1) if plan else None,
        explanation=plan.explanation if plan else UNPLANNED_EXPLANATION,
    )


def resolved(layout: LayoutStatus, spec: LongContextJobSpec) -> ResolvedLayout:
    """The recorded layout to render again; a status from before attention was recorded runs the spec's."""
    attention = TRAINER_ATTENTION[layout.attention] if layout.attention else unplanned_attention(spec)
    return ResolvedLayout(
        data=layout.data,
        context=layout.context,
        tensor=layout.tensor,
        processes_per_node=layout.processes_per_node,
        offload=layout.offload,
        chunk_tokens=layout.chunk_tokens,
        attention=attention,
        ulysses=layout.ulysses or spec.parallelism.ulysses or 1,
        step_seconds=spec.batch_tokens / layout.estimated_tokens_per_second
        if layout.estimated_tokens_per_second
        else None,
        remat_policy=TRAINER_REMAT_POLICY[layout.remat_policy] if layout.remat_policy else DEFAULT_REMAT_POLICY,
        load_balance=TRAINER_LOAD_BALANCE[layout.load_balance] if layout.load_balance else spec.trainer_load_balance(),
    )


@dataclass
class _Next:
    """The status being decided, with the events its condition transitions produce."""

    status: LongContextJobStatus
    now: datetime
    spec_generation: int
    events: list[Event] = field(default_factory=list)
    actions: list = field(default_factory=list)
    condition_events: list[Event] = field(default_factory=list)

    def set(self, **values) -> None:
        if values.get("message"):  # may quote pods, Kueue or the API server (text.py)
            values["message"] = printable(values["message"])
        self.status = self.status.model_copy(update=values)

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
        self.set(conditions=[c for c in self.status.conditions if c.type != kind] + [new])
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
        if any(c.type == kind and c.status == "True" for c in self.status.conditions):
            self.condition(kind, False, reason, message)

    def restart_clock(self, kind: ConditionType) -> None:
        """Forgets `kind`, so setting it again records a new transition time and Event."""
        self.set(conditions=[c for c in self.status.conditions if c.type != kind])

    def condition_since(self, kind: ConditionType, status: str = "True") -> datetime | None:
        c = next((c for c in self.status.conditions if c.type == kind and c.status == status), None)
        return parse_time(c.last_transition_time) if c else None

    def decision(self, requeue_after: float | None = None) -> Decision:
        return Decision(self.status, tuple(self.actions), tuple(self.events), requeue_after)


def _plan(n: _Next, spec: LongContextJobSpec) -> bool:
    """Plans the layout for a new or changed spec; False when the planner rejects it."""
    if n.status.layout is not None and n.status.observed_generation == n.spec_generation:
        return next((c.status == "True" for c in n.status.conditions if c.type == conditions.LAYOUT_PLANNED), True)
    n.set(observed_generation=n.spec_generation)
    try:
        layout, plan = resolve_layout(spec)
    except PlanError as e:
        n.condition(conditions.LAYOUT_PLANNED, False, reasons.PLAN_FAILED, str(e))
        return False
    status = layout_status(spec, layout, plan)
    n.set(layout=status)
    n.condition(
        conditions.LAYOUT_PLANNED,
        True,
        reasons.PLANNED,
        f"data {layout.data} x context {layout.context} x tensor {layout.tensor}, "
        f"{status.processes} processes"
        + (f", offload chunks of {layout.chunk_tokens} tokens" if layout.offload and layout.chunk_tokens else ""),
    )
    n.events.extend(Event("Warning", a.reason, a.message) for a in advice(spec))
    return True


def _fail(n: _Next, reason: Reason, message: str) -> Decision:
    n.set(phase="Failed", reason=reason, message=message, completion_time=timestamp(n.now))
    n.clear(conditions.RUNNING, reason, message)
    n.condition(conditions.FAILED, True, reason, message)
    return n.decision()


def restart_backoff(spec: LongContextJobSpec, restarts: int) -> float:
    """Wait before the generation of gang restart `restarts` (1, 2, ...): restartPolicy.backoffSeconds
    (at least BACKOFF_FLOOR_SECONDS), doubling with each restart up to BACKOFF_CAP_SECONDS (or the
    base, if longer), so that a gang that fails at once cannot churn pods as fast as they start."""
    base = max(float(spec.restart_policy.backoff_seconds), BACKOFF_FLOOR_SECONDS)
    return min(base * 2.0 ** min(max(restarts - 1, 0), 32), max(base, BACKOFF_CAP_SECONDS))


def _gang_failed(
    n: _Next, spec: LongContextJobSpec, generation: int, uid: str | None, reason: Reason, message: str
) -> Decision:
    """Any failed rank takes the whole gang down: delete its Job (`uid`; None when it was never
    created), then restart it or give up."""
    if uid is not None:
        n.actions.append(DeleteWorkload(generation, uid, broken=True))
    n.set(current_workload=None, last_restart=preemption.restart_record(reason, message, n.now, _checkpoint_step(n)))
    n.clear(conditions.RENDEZVOUS, reason, message)
    if n.status.restarts >= spec.restart_policy.max_restarts:
        return _fail(
            n,
            reason,
            f"{message} (after {n.status.restarts} gang restarts, "
            f"restartPolicy.maxRestarts is {spec.restart_policy.max_restarts})",
        )
    n.set(phase="Restarting", reason=reason, message=message, restarts=n.status.restarts + 1)
    n.clear(conditions.RUNNING, reason, message)
    n.restart_clock(conditions.RESTARTING)
    n.condition(conditions.RESTARTING, True, reason, f"gang restart {n.status.restarts}: {message}")
    return n.decision(requeue_after=restart_backoff(spec, n.status.restarts))


def _gang_stalled(
    n: _Next, spec: LongContextJobSpec, generation: int, uid: str, reason: Reason, message: str
) -> Decision:
    """A hung gang (or a straggler, with restartPolicy.onStraggler): delete the generation and start
    the next from the last checkpoint, counted in stallRestarts against maxStallRestarts, apart from
    failures."""
    n.actions.append(DeleteWorkload(generation, uid, broken=True))
    n.set(current_workload=None, last_restart=preemption.restart_record(reason, message, n.now, _checkpoint_step(n)))
    n.condition(conditions.STALLED, True, reason, message)
    n.clear(conditions.RENDEZVOUS, reason, message)
    n.clear(conditions.RUNNING, reason, message)
    limit = spec.restart_policy.max_stall_restarts
    if n.status.stall_restarts >= limit:
        return _fail(
            n,
            reason,
            f"{message} (after {n.status.stall_restarts} stall restarts, restartPolicy.maxStallRestarts is {limit})",
        )
    n.set(phase="Restarting", reason=reason, message=message, stall_restarts=n.status.stall_restarts + 1)
    n.restart_clock(conditions.RESTARTING)
    n.condition(conditions.RESTARTING, True, reason, f"stall restart {n.status.stall_restarts}: {message}")
    return n.decision(requeue_after=restart_backoff(spec, n.status.restarts + n.status.stall_restarts))


def _running_health(
    n: _Next, spec: LongContextJobSpec, generation: int, uid: str, health: GangHealth | None
) -> Decision | None:
    """The watchdog's verdict on a Running generation: a stall restarts the gang (when
    hangDetection.enabled); stragglers set the Straggler condition and restart it only when
    restartPolicy.onStraggler asks. None: carry on."""
    if health is None or health.generation != generation:
        return None
    if health.stall is not None and spec.hang_detection.enabled:
        return _gang_stalled(n, spec, generation, uid, reasons.STALLED, health.stall.describe())
    if health.stragglers:
        message = "; ".join(s.describe() for s in health.stragglers)
        n.condition(conditions.STRAGGLER, True, reasons.STRAGGLER_DETECTED, message)
        if spec.restart_policy.on_straggler:
            return _gang_stalled(n, spec, generation, uid, reasons.STRAGGLER_DETECTED, f"straggler: {message}")
    else:
        n.clear(conditions.STRAGGLER, reasons.NO_STRAGGLER, "every rank's step time is near the gang's median")
    return None


def _overdue(n: _Next, observed: WorkloadObservation) -> tuple[str, ...]:
    """The lost pods whose graceful deletion is overdue at `n.now` (or not yet asked for)."""
    return tuple(p.name for p in observed.lost_pods if p.overdue is None or p.overdue <= n.now)


def _next_overdue(n: _Next, observed: WorkloadObservation) -> float | None:
    """Seconds until the next lost pod's graceful deletion is overdue, if one is still due."""
    due = [(p.overdue - n.now).total_seconds() for p in observed.lost_pods if p.overdue and p.overdue > n.now]
    return min(due) + 0.5 if due else None


def _sooner(decision: Decision, seconds: float | None) -> Decision:
    if seconds is None or (decision.requeue_after is not None and decision.requeue_after <= seconds):
        return decision
    return replace(decision, requeue_after=seconds)


def _checkpoint_step(n: _Next) -> int | None:
    return n.status.progress.last_checkpoint_step if n.status.progress is not None else None


def _evicted(n: _Next, kueue: KueueVerdict | None) -> Decision:
    """Kueue suspended an admitted Job (preemption by a higher-priority workload, waitForPodsReady,
    quota reclaim): the Job controller stops every pod, whose ranks save one step on SIGTERM. The
    same Job stays, suspended, so Kueue's requeue backoff and limit apply to its Workload; when
    Kueue admits it again its pods start and resume from that checkpoint. Not a failure: no
    restart is counted, no generation made. The message carries Kueue's own reason (Preempted,
    PodsReadyTimeout, ...) when its Workload says it."""
    why = f"evicted it: {kueue.describe()}" if kueue is not None and kueue.evicted else "preempted or evicted it"
    message = (
        f"Kueue suspended Job {n.status.current_workload} ({why}); its ranks save a checkpoint and "
        "stop, and the same Job resumes from it when Kueue admits it again"
    )
    n.set(
        phase="Pending",
        reason=reasons.EVICTED_BY_KUEUE,
        message=message,
        last_restart=preemption.restart_record(reasons.EVICTED_BY_KUEUE, message, n.now, _checkpoint_step(n)),
    )
    n.clear(conditions.RUNNING, reasons.EVICTED_BY_KUEUE, message)
    n.clear(conditions.RENDEZVOUS, reasons.EVICTED_BY_KUEUE, message)
    n.condition(conditions.ADMITTED, False, reasons.EVICTED_BY_KUEUE, message)
    return n.decision()


def _preempted(n: _Next, spec: LongContextJobSpec, rank: RankPreemption) -> Decision:
    """A rank got SIGTERM (its pod deleted, its node drained): every rank saved one step and ended
    PREEMPTED_EXIT_CODE, which the Job's pod failure policy ignores, so the same Job replaces the
    pods and they resume from that step. No restart is counted; the startup timeout runs again
    from the preemption."""
    message = rank.describe()
    n.set(
        phase="Starting",
        reason=reasons.PREEMPTED,
        message=message,
        last_restart=preemption.restart_record(
            reasons.PREEMPTED, message, rank.finished or n.now, rank.step if rank.step >= 0 else _checkpoint_step(n)
        ),
    )
    n.clear(conditions.RUNNING, reasons.PREEMPTED, message)
    n.clear(conditions.RENDEZVOUS, reasons.PREEMPTED, message)
    return n.decision(requeue_after=float(spec.scheduling.startup_timeout_seconds))


def _admit_next(
    n: _Next,
    spec: LongContextJobSpec,
    job_name: str,
    admit: Callable[[], Admission],
    planned: bool,
    pod_annotations_error: str | None,
    admission_error: str | None,
    settings_error: str | None,
    network_error: str | None,
) -> Decision:
    """Admission of the next generation; creates nothing unless the whole gang is admitted."""
    if not planned:
        return _fail(
            n, reasons.PLAN_FAILED, next(c.message for c in n.status.conditions if c.type == conditions.LAYOUT_PLANNED)
        )
    if settings_error is not None:  # waits for the spec (or the operator's allow-lists) to change
        n.set(phase="Pending", reason=reasons.SETTING_NOT_ALLOWED, message=settings_error)
        n.condition(conditions.ADMITTED, False, reasons.SETTING_NOT_ALLOWED, settings_error)
        return n.decision()
    if network_error is not None:  # waits for the spec or the operator's networkAllowList to change
        n.set(phase="Pending", reason=reasons.NETWORK_NOT_ALLOWED, message=network_error)
        n.condition(conditions.ADMITTED, False, reasons.NETWORK_NOT_ALLOWED, network_error)
        return n.decision()
    if pod_annotations_error is not None:  # waits for the job's annotation to change
        n.set(phase="Pending", reason=reasons.POD_ANNOTATIONS_REJECTED, message=pod_annotations_error)
        n.condition(conditions.POD_ANNOTATIONS_ACCEPTED, False, reasons.POD_ANNOTATIONS_REJECTED, pod_annotations_error)
        return n.decision()
    if any(c.type == conditions.POD_ANNOTATIONS_ACCEPTED for c in n.status.conditions):
        n.condition(
            conditions.POD_ANNOTATIONS_ACCEPTED,
            True,
            reasons.POD_ANNOTATIONS_ACCEPTED,
            "the pod annotations are allowed",
        )
    if admission_error is not None:  # the operator's admission policy; waits for the spec to change
        n.set(phase="Pending", reason=reasons.ADMISSION_NOT_ALLOWED, message=admission_error)
        n.condition(conditions.ADMITTED, False, reasons.ADMISSION_NOT_ALLOWED, admission_error)
        return n.decision()
    mode = spec.scheduling.admission
    if mode == "builtin":
        verdict = admit()
        if not verdict.fits:
            n.set(phase="Pending", reason=verdict.reason, message=verdict.message)
            n.condition(conditions.ADMITTED, False, verdict.reason, verdict.message)
            return n.decision(requeue_after=ADMISSION_RETRY_SECONDS)
        admitted = (conditions.ADMITTED, True, verdict.reason, verdict.message)
    elif mode == "kueue":
        admitted = (
            conditions.ADMITTED,
            False,
            reasons.QUEUED_IN_KUEUE,
            f"Job created suspended in LocalQueue {spec.scheduling.queue_name}; Kueue admits it",
        )
    else:
        admitted = (conditions.ADMITTED, True, reasons.ADMISSION_DISABLED, "scheduling.admission is none")
    generation = (n.status.workload_generation or 0) + 1
    workload = names.workload_name(job_name, generation)
    n.set(
        phase="Admitted" if admitted[1] else "Pending",
        reason=admitted[2],
        message=admitted[3],
        workload_generation=generation,
        current_workload=workload,
        workers=None,
    )
    n.condition(*admitted)
    n.restart_clock(conditions.WORKLOAD_CREATED)  # a new generation's create has its own history and clock
    n.actions.append(CreateWorkload(generation, resolved(n.status.layout, spec)))
    return n.decision(requeue_after=float(spec.scheduling.startup_timeout_seconds))


def _startup_left(n: _Next, spec: LongContextJobSpec, since: datetime) -> float:
    """Seconds of scheduling.startupTimeoutSeconds left when the generation's start began at `since`
    (negative once it has run out)."""
    return spec.scheduling.startup_timeout_seconds - (n.now - since).total_seconds()


def _create_refused(n: _Next, spec: LongContextJobSpec, generation: int, error: str) -> Decision:
    """The API server refuses the generation's workload (quota, policy webhook, ...): say so in the
    status and keep trying until the startup timeout, which then counts as a failed start."""
    n.condition(conditions.WORKLOAD_CREATED, False, reasons.WORKLOAD_CREATE_FAILED, error)
    left = _startup_left(n, spec, n.condition_since(conditions.WORKLOAD_CREATED, "False") or n.now)
    if left < 0:
        return _gang_failed(
            n,
            spec,
            generation,
            None,
            reasons.STARTUP_TIMEOUT,
            f"startup timeout: the workload was not created within "
            f"{spec.scheduling.startup_timeout_seconds}s (scheduling.startupTimeoutSeconds): {error}",
        )
    n.set(reason=reasons.WORKLOAD_CREATE_FAILED, message=error)
    n.actions.append(CreateWorkload(generation, resolved(n.status.layout, spec)))
    return n.decision(requeue_after=max(0.5, left + 0.5))


def _name_taken(n: _Next, error: str) -> Decision:
    """A child's name belongs to an object this job does not own: the job fails at once with the
    reason, and nothing is deleted (nothing of that generation is this job's)."""
    n.set(current_workload=None)
    n.condition(conditions.WORKLOAD_CREATED, False, reasons.NAME_TAKEN, error)
    return _fail(n, reasons.NAME_TAKEN, error)


def _watch_workload(
    n: _Next, spec: LongContextJobSpec, job_name: str, observed: WorkloadObservation, health: GangHealth | None
) -> Decision:
    generation = n.status.workload_generation
    if not observed.exists or observed.deleting:
        if observed.name_taken and observed.create_error is not None:
            return _name_taken(n, observed.create_error)
        if observed.create_error is not None:
            return _create_refused(n, spec, generation, observed.create_error)
        # Not seen yet (just created) or removed by someone else: create-or-get it again.
        n.actions.append(CreateWorkload(generation, resolved(n.status.layout, spec)))
        return n.decision(requeue_after=DELETE_WAIT_SECONDS)
    if any(c.type == conditions.WORKLOAD_CREATED for c in n.status.conditions):
        n.condition(conditions.WORKLOAD_CREATED, True, reasons.CREATED, f"Job {n.status.current_workload} created")
    n.set(
        workers=WorkersStatus(
            total=observed.total, ready=observed.ready, failed=observed.failed, succeeded=observed.succeeded
        )
    )
    if observed.complete:
        n.set(
            phase="Succeeded",
            reason=reasons.COMPLETED,
            message=f"all {observed.total} ranks completed",
            completion_time=timestamp(n.now),
        )
        if n.status.progress is not None:  # reads cap a Running job at 99.9 % (progress.completion)
            n.set(
                progress=n.status.progress.model_copy(
                    update={"percent_complete": 100.0, "eta": None, "estimated_completion_time": None}
                )
            )
        n.clear(conditions.RUNNING, reasons.COMPLETED, f"generation {generation} completed")
        n.clear(conditions.RENDEZVOUS, reasons.COMPLETED, f"generation {generation} completed")
        n.condition(conditions.SUCCEEDED, True, reasons.COMPLETED, f"all {observed.total} ranks completed")
        return n.decision()
    if observed.failure is not None and observed.failure.node_lost:
        n.actions.append(DeleteWorkload(generation, observed.uid, _overdue(n, observed), broken=True))
        decision = _gang_failed(n, spec, generation, None, reasons.NODE_NOT_READY, observed.failure.describe())
        return _sooner(decision, _next_overdue(n, observed))
    if observed.failure is not None:
        return _gang_failed(n, spec, generation, observed.uid, reasons.RANK_FAILED, observed.failure.describe())
    if observed.suspended:
        admitted = any(c.type == conditions.ADMITTED and c.status == "True" for c in n.status.conditions)
        if not admitted:  # Kueue has not admitted it (again) yet: show why, in Kueue's words
            if observed.kueue is not None:
                evicted = n.status.reason == reasons.EVICTED_BY_KUEUE or observed.kueue.evicted
                reason = reasons.EVICTED_BY_KUEUE if evicted else reasons.QUEUED_IN_KUEUE
                message = (
                    f"Job suspended in LocalQueue {spec.scheduling.queue_name}; Kueue: {observed.kueue.describe()}"
                )
                n.set(reason=reason, message=message)
                n.condition(conditions.ADMITTED, False, reason, message)
            return n.decision()
        return _evicted(n, observed.kueue)
    if observed.preemption is not None and preemption.is_new_preemption(n.status.last_restart, observed.preemption):
        return _preempted(n, spec, observed.preemption)
    if spec.scheduling.admission == "kueue":
        n.condition(conditions.ADMITTED, True, reasons.ADMITTED_BY_KUEUE, "Kueue unsuspended the Job")
        if n.status.phase == "Pending":
            n.set(phase="Admitted", reason=reasons.ADMITTED_BY_KUEUE, message="Kueue unsuspended the Job")
    if observed.all_running:
        n.set(
            phase="Running",
            reason=reasons.ALL_RANKS_RUNNING,
            message=f"{observed.total} ranks Running",
            start_time=n.status.start_time or timestamp(n.now),
        )
        n.condition(conditions.RUNNING, True, reasons.ALL_RANKS_RUNNING, f"{observed.total} ranks Running")
        if observed.all_ready:
            n.condition(conditions.RENDEZVOUS, True, reasons.ALL_RANKS_READY, f"all {observed.total} ranks Ready")
        if n.status.restarts or n.status.stall_restarts:
            n.condition(conditions.RESTARTING, False, reasons.RECOVERED, f"generation {generation} is Running")
        n.clear(conditions.STALLED, reasons.RECOVERED, f"generation {generation} is Running")
        return _running_health(n, spec, generation, observed.uid, health) or n.decision()
    if n.status.phase == "Running":
        return n.decision()
    # Kueue unsuspends a Job later than it was created: the clock starts at the later of both.
    # A preemption in place restarts the pods (and the clock) too.
    starts = (
        observed.created,
        n.condition_since(conditions.ADMITTED),
        preemption.preempted_since(n.status.last_restart),
    )
    times = [t for t in starts if t is not None]
    left = _startup_left(n, spec, max(times) if times else n.now)
    if left < 0:
        return _gang_failed(
            n,
            spec,
            generation,
            observed.uid,
            reasons.STARTUP_TIMEOUT,
            f"startup timeout: {observed.running} of {observed.total} ranks Running after "
            f"{spec.scheduling.startup_timeout_seconds}s (scheduling.startupTimeoutSeconds)",
        )
    if observed.running and n.status.phase != "Starting":
        n.set(
            phase="Starting",
            reason=reasons.RANKS_STARTING,
            message=f"{observed.running} of {observed.total} ranks Running",
        )
    return n.decision(requeue_after=max(0.5, left + 0.5))


def decide(
    job_name: str,
    spec: LongContextJobSpec,
    spec_generation: int,
    status: LongContextJobStatus,
    observed: WorkloadObservation,
    now: datetime,
    admit: Callable[[], Admission],
    pod_annotations_error: str | None = None,
    admission_error: str | None = None,
    settings_error: str | None = None,
    network_error: str | None = None,
    health: GangHealth | None = None,
) -> Decision:
    """The next step of job `job_name` (metadata.generation `spec_generation`) whose last workload
    generation (status.workloadGeneration) looks like `observed`. `pod_annotations_error` says why
    the pod annotations the job asks for are refused (annotations.py), `admission_error` why the
    operator's admission policy refuses the job (admission.scheduling_for; `spec` is the spec with
    that policy applied), `settings_error` why its priority class or a toleration is (policy.py),
    `network_error` why its fabric or networks are (OperatorConfig.network_allow_list); no
    generation is created while one of them is set. `health` is the watchdog's verdict on the
    ranks of a Running generation (stall.py, straggler.py)."""
    n = _Next(status, now, spec_generation)
    if status.phase in TERMINAL:
        return n.decision()
    planned = _plan(n, spec)
    current = status.workload_generation
    if spec.suspend:
        if observed.exists and not observed.deleting:
            n.actions.append(DeleteWorkload(current, observed.uid))
        n.set(current_workload=None)
        n.set(phase="Suspended", reason=reasons.SUSPENDED, message="spec.suspend is true; the workload is deleted")
        n.clear(conditions.RUNNING, reasons.SUSPENDED, "spec.suspend is true")
        n.clear(conditions.RENDEZVOUS, reasons.SUSPENDED, "spec.suspend is true")
        n.condition(conditions.SUSPENDED, True, reasons.SUSPENDED, "spec.suspend is true; the workload is deleted")
        return n.decision()
    if status.phase == "Suspended":
        n.condition(
            conditions.SUSPENDED, False, reasons.RESUMED, "the next generation resumes from the last checkpoint"
        )
    if status.current_workload:  # a generation was admitted and not deleted since
        return _watch_workload(n, spec, job_name, observed, health)
    if observed.exists:  # the previous generation is (still being) deleted
        if not observed.deleting or _overdue(n, observed):
            n.actions.append(DeleteWorkload(current, observed.uid, _overdue(n, observed)))
        return _sooner(n.decision(requeue_after=DELETE_WAIT_SECONDS), _next_overdue(n, observed))
    if status.phase == "Restarting":
        since = n.condition_since(conditions.RESTARTING) or now
        remaining = restart_backoff(spec, status.restarts) - (now - since).total_seconds()
        if remaining > 0:
            return n.decision(requeue_after=remaining)
    return _admit_next(
        n, spec, job_name, admit, planned, pod_annotations_error, admission_error, settings_error, network_error
    )
