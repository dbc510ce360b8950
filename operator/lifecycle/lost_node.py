"""A lost node, and the deletion of a previous generation: a rank on a NotReady node restarts the
gang at once; its pods there are deleted with no grace period once their graceful deletion is
overdue (no kubelet will confirm their end)."""

from __future__ import annotations

from .. import reasons
from ..api.spec import LongContextJobSpec
from ..observe import WorkloadObservation
from .decision import DELETE_WAIT_SECONDS, Decision, DeleteWorkload, sooner
from .draft import Draft
from .gang_restart import gang_failed


def overdue(n: Draft, observed: WorkloadObservation) -> tuple[str, ...]:
    """The lost pods whose graceful deletion is overdue at `n.now` (or not yet asked for)."""
    return tuple(p.name for p in observed.lost_pods if p.overdue is None or p.overdue <= n.now)


def next_overdue(n: Draft, observed: WorkloadObservation) -> float | None:
    """Seconds until the next lost pod's graceful deletion is overdue, if one is still due."""
    due = [(p.overdue - n.now).total_seconds() for p in observed.lost_pods if p.overdue and p.overdue > n.now]
    return min(due) + 0.5 if due else None


def node_lost(n: Draft, spec: LongContextJobSpec, generation: int, observed: WorkloadObservation) -> Decision:
    """A rank's node is lost (observed.failure.node_lost): delete the generation and restart the gang."""
    n.actions.append(DeleteWorkload(generation, observed.uid, overdue(n, observed), broken=True))
    decision = gang_failed(n, spec, generation, None, reasons.NODE_NOT_READY, observed.failure.describe())
    return sooner(decision, next_overdue(n, observed))


def await_deletion(n: Draft, generation: int, observed: WorkloadObservation) -> Decision:
    """The previous generation is (still being) deleted: ask for it again where no delete was seen
    or a lost pod is overdue, and look again soon."""
    if not observed.deleting or overdue(n, observed):
        n.actions.append(DeleteWorkload(generation, observed.uid, overdue(n, observed)))
    return sooner(n.decision(requeue_after=DELETE_WAIT_SECONDS), next_overdue(n, observed))
