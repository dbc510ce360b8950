"""spec.suspend: the workload is deleted and the job Suspended; unsuspending creates the next
generation, which resumes from the last checkpoint."""

from __future__ import annotations

from .. import conditions, reasons
from ..api.status import SUSPENDED
from ..observe import WorkloadObservation
from .decision import Decision, DeleteWorkload
from .draft import Draft


def suspend(n: Draft, generation: int | None, observed: WorkloadObservation) -> Decision:
    """Deletes the workload of `generation` (where it still stands) and holds the job Suspended."""
    if observed.exists and not observed.deleting:
        n.actions.append(DeleteWorkload(generation, observed.uid))
    n.set(current_workload=None)
    n.set(phase=SUSPENDED, reason=reasons.SUSPENDED, message="spec.suspend is true; the workload is deleted")
    n.clear(conditions.RUNNING, reasons.SUSPENDED, "spec.suspend is true")
    n.clear(conditions.RENDEZVOUS, reasons.SUSPENDED, "spec.suspend is true")
    n.condition(conditions.SUSPENDED, True, reasons.SUSPENDED, "spec.suspend is true; the workload is deleted")
    return n.decision()


def resume(n: Draft) -> None:
    """A Suspended job whose spec.suspend is false again: the next generation resumes."""
    if n.status.phase == SUSPENDED:
        n.condition(
            conditions.SUSPENDED, False, reasons.RESUMED, "the next generation resumes from the last checkpoint"
        )
