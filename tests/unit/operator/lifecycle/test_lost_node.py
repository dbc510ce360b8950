"""lifecycle.lost_node (observe.lost_node): a lost node restarts the gang at once and deletes the
lost pods once their graceful deletion is overdue."""

from datetime import timedelta

import pytest

from longctx_operator import reasons
from longctx_operator.lifecycle.decision import DeleteWorkload
from longctx_operator.observe import LostPod, RankFailure, WorkloadObservation
from support.lifecycle import T0, UID, decide_with, running_status, spec


def test_a_lost_node_restarts_the_gang_at_once_and_deletes_the_lost_pod_once_its_grace_is_over():
    """The gang restarts at once; the lost pod is deleted with no grace period only when its
    graceful deletion is overdue (a live kubelet would have ended it by then)."""
    s = spec()
    overdue = T0 + timedelta(seconds=30)
    lost = WorkloadObservation(
        exists=True,
        uid=UID,
        created=T0,
        total=2,
        running=2,
        failure=RankFailure(1, "job-g1-1-x", "node node-b is NotReady or unreachable", node_lost=True),
        lost_pods=(LostPod("job-g1-1-x", overdue),),
    )
    restarted = decide_with(s, running_status(s), None, lost)
    assert restarted.actions == (DeleteWorkload(1, UID, broken=True),)
    assert (restarted.status.phase, restarted.status.reason) == ("Restarting", reasons.NODE_NOT_READY)
    assert restarted.status.restarts == 1 and "node node-b" in restarted.status.message
    assert restarted.requeue_after == pytest.approx(10)  # the backoff comes first
    deleting = WorkloadObservation(exists=True, uid=UID, deleting=True, lost_pods=lost.lost_pods)
    waiting = decide_with(s, restarted.status, None, deleting, now=T0 + timedelta(seconds=20))
    assert waiting.actions == () and waiting.requeue_after == pytest.approx(1.0)
    late = decide_with(s, restarted.status, None, deleting, now=T0 + timedelta(seconds=29.8))
    assert late.requeue_after == pytest.approx(0.7)
    due = decide_with(s, restarted.status, None, deleting, now=overdue)
    assert due.actions == (DeleteWorkload(1, UID, ("job-g1-1-x",)),)
