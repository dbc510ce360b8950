"""scheduling.startupTimeoutSeconds: a generation whose ranks are not all Running in time (or whose
workload the API server keeps refusing) counts as a failed start, a gang restart."""

from __future__ import annotations

from datetime import datetime

from .. import conditions, preemption, reasons
from ..api.spec import LongContextJobSpec
from ..api.status import STARTING
from ..observe import WorkloadObservation
from .decision import Decision
from .draft import Draft
from .gang_restart import gang_failed


def startup_left(n: Draft, spec: LongContextJobSpec, since: datetime) -> float:
    """Seconds of scheduling.startupTimeoutSeconds left when the generation's start began at `since`
    (negative once it has run out)."""
    return spec.scheduling.startup_timeout_seconds - (n.now - since).total_seconds()


def starting(n: Draft, spec: LongContextJobSpec, generation: int, observed: WorkloadObservation) -> Decision:
    """Some ranks are not Running yet: Starting until the startup timeout, then a gang restart."""
    # Kueue unsuspends a Job later than it was created: the clock starts at the later of both.
    # A preemption in place restarts the pods (and the clock) too.
    starts = (
        observed.created,
        n.condition_since(conditions.ADMITTED),
        preemption.preempted_since(n.status.last_restart),
    )
    times = [t for t in starts if t is not None]
    left = startup_left(n, spec, max(times) if times else n.now)
    if left < 0:
        return gang_failed(
            n,
            spec,
            generation,
            observed.uid,
            reasons.STARTUP_TIMEOUT,
            f"startup timeout: {observed.running} of {observed.total} ranks Running after "
            f"{spec.scheduling.startup_timeout_seconds}s (scheduling.startupTimeoutSeconds)",
        )
    if observed.running and n.status.phase != STARTING:
        n.set(
            phase=STARTING,
            reason=reasons.RANKS_STARTING,
            message=f"{observed.running} of {observed.total} ranks Running",
        )
    return n.decision(requeue_after=max(0.5, left + 0.5))
