"""`decide`: the next step of a job, composed of the policies of this package (see __init__)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from .. import conditions, preemption, reasons
from ..admission import Admission
from ..api.spec import LongContextJobSpec
from ..api.status import RESTARTING, RUNNING, TERMINAL, LongContextJobStatus, WorkersStatus
from ..observe import WorkloadObservation
from ..stall import GangHealth
from . import kueue
from .admit import admit_next
from .create_refusal import create_again, create_refused, name_taken
from .decision import Decision
from .draft import Draft
from .gang_restart import backoff_left, gang_failed
from .lost_node import await_deletion, node_lost
from .planning import plan
from .preempted import preempted
from .running import all_running, completed
from .startup import starting
from .suspend import resume, suspend


def _watch_workload(
    n: Draft, spec: LongContextJobSpec, observed: WorkloadObservation, health: GangHealth | None
) -> Decision:
    """The admitted generation, as observed."""
    generation = n.status.workload_generation
    if not observed.exists or observed.deleting:
        if observed.name_taken and observed.create_error is not None:
            return name_taken(n, observed.create_error)
        if observed.create_error is not None:
            return create_refused(n, spec, generation, observed.create_error)
        return create_again(n, spec, generation)
    if n.has(conditions.WORKLOAD_CREATED):
        n.condition(conditions.WORKLOAD_CREATED, True, reasons.CREATED, f"Job {n.status.current_workload} created")
    n.set(
        workers=WorkersStatus(
            total=observed.total, ready=observed.ready, failed=observed.failed, succeeded=observed.succeeded
        )
    )
    if observed.complete:
        return completed(n, generation, observed)
    if observed.failure is not None and observed.failure.node_lost:
        return node_lost(n, spec, generation, observed)
    if observed.failure is not None:
        return gang_failed(n, spec, generation, observed.uid, reasons.RANK_FAILED, observed.failure.describe())
    if observed.suspended:
        return kueue.suspended(n, spec, observed.kueue)
    if observed.preemption is not None and preemption.is_new_preemption(n.status.last_restart, observed.preemption):
        return preempted(n, spec, observed.preemption)
    if spec.scheduling.admission == "kueue":
        kueue.unsuspended(n)
    if observed.all_running:
        return all_running(n, spec, generation, observed, health)
    if n.status.phase == RUNNING:
        return n.decision()
    return starting(n, spec, generation, observed)


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
    n = Draft(status, now, spec_generation)
    if status.phase in TERMINAL:
        return n.decision()
    planned = plan(n, spec)
    if spec.suspend:
        return suspend(n, status.workload_generation, observed)
    resume(n)
    if status.current_workload:  # a generation was admitted and not deleted since
        return _watch_workload(n, spec, observed, health)
    if observed.exists:  # the previous generation is (still being) deleted
        return await_deletion(n, status.workload_generation, observed)
    if status.phase == RESTARTING and (remaining := backoff_left(n, spec)) > 0:
        return n.decision(requeue_after=remaining)
    return admit_next(
        n, spec, job_name, admit, planned, pod_annotations_error, admission_error, settings_error, network_error
    )
