"""A generation whose ranks all run: Running (with the watchdog's verdict), then Succeeded once
every rank completed."""

from __future__ import annotations

from .. import conditions, reasons
from ..api.spec import LongContextJobSpec
from ..api.status import RUNNING, SUCCEEDED
from ..observe import WorkloadObservation, timestamp
from ..stall import GangHealth
from .decision import Decision
from .draft import Draft
from .health import running_health


def completed(n: Draft, generation: int, observed: WorkloadObservation) -> Decision:
    """Every rank completed: Succeeded."""
    n.set(
        phase=SUCCEEDED,
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


def all_running(
    n: Draft, spec: LongContextJobSpec, generation: int, observed: WorkloadObservation, health: GangHealth | None
) -> Decision:
    """Every rank Running: Running (Rendezvous once all are Ready), a restart recovered, and the
    watchdog's verdict on the gang applied."""
    n.set(
        phase=RUNNING,
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
    return running_health(n, spec, generation, observed.uid, health) or n.decision()
