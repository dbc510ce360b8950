"""lifecycle.decide on the watchdog's verdicts (stall.py, straggler.py) and on a lost node
(observe.lost_node): a stall restarts the gang, counted apart from failures; a straggler sets a
condition and restarts nothing unless restartPolicy.onStraggler asks; a lost node restarts the
gang at once and deletes the lost pods."""

from datetime import UTC, datetime, timedelta

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.admission import Admission
from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.decide import decide
from longctx_operator.lifecycle.decision import DeleteWorkload
from longctx_operator.observe import MISSING, LostPod, RankFailure, WorkloadObservation
from longctx_operator.stall import GangHealth, RankTrack, Stall
from longctx_operator.straggler import Straggler

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UID = "job-g1-uid"
FITS = Admission(True, reasons.GANG_FITS, "2 of 4 free nodes")


def spec(**over) -> LongContextJobSpec:
    base = {
        "model": {"preset": "tiny"},
        "sequenceLength": 4096,
        "steps": 10,
        "resources": {"nodes": 2, "gpusPerNode": 8, "gpuType": "h100-80gb"},
        "restartPolicy": {"backoffSeconds": 10},
        "checkpoint": {"persistentVolumeClaim": "shared"},
    }
    for key, value in over.items():
        base[key] = {**base.get(key, {}), **value}
    return LongContextJobSpec.model_validate(base)


def running():
    return WorkloadObservation(exists=True, uid=UID, created=T0, total=2, running=2, ready=2)


def step(s, status, observed=MISSING, now=T0):
    return decide("job", s, 1, status, observed, now, lambda: FITS), None


def conditions(status):
    return {c.type: (c.status, c.reason) for c in status.conditions}


STOPPED = RankTrack(1, "job-g1-1-x", "node-b", "training", 40, 1.0, False, 0.0, 0.0)
STALL = Stall((STOPPED,), 65.0, 60.0, startup=False)
SLOW = Straggler(1, "job-g1-1-x", "node-b", 3.0, 1.0)


def decide_with(s, status, health, observed=None, now=T0):
    return decide("job", s, 1, status, observed or running(), now, lambda: None, health=health)


def running_status(s):
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    assert run.status.phase == "Running"
    return run.status


def test_a_stall_restarts_the_gang_naming_the_stopped_rank_counted_apart_from_failures():
    s = spec(restartPolicy={"maxStallRestarts": 1})
    stalled = decide_with(s, running_status(s), GangHealth(1, STALL))
    assert stalled.actions == (DeleteWorkload(1, UID, broken=True),)
    assert (stalled.status.phase, stalled.status.reason) == ("Restarting", reasons.STALLED)
    assert (stalled.status.restarts, stalled.status.stall_restarts) == (0, 1)
    assert conditions(stalled.status)[cond.STALLED] == ("True", reasons.STALLED)
    [event] = [e for e in stalled.events if e.reason == reasons.STALLED and e.type == "Warning"][:1]
    assert "rank 1 (pod job-g1-1-x, phase training, step 40, not answering)" in event.message
    # the next generation runs: Stalled clears; a second stall passes maxStallRestarts: Failed
    again, _ = step(s, stalled.status, WorkloadObservation(exists=False), now=T0 + timedelta(seconds=60))
    gen2 = again.status.model_copy(update={"current_workload": "job-g2", "workload_generation": 2})
    recovered = decide_with(s, gen2, None)
    assert conditions(recovered.status)[cond.STALLED] == ("False", reasons.RECOVERED)
    failed = decide_with(s, recovered.status, GangHealth(2, STALL))
    assert failed.status.phase == "Failed" and "restartPolicy.maxStallRestarts is 1" in failed.status.message


def test_a_verdict_on_another_generation_or_with_hang_detection_off_changes_nothing():
    s = spec()
    status = running_status(s)
    assert decide_with(s, status, GangHealth(7, STALL)).actions == ()
    off = spec(hangDetection={"enabled": False})
    assert decide_with(off, running_status(off), GangHealth(1, STALL)).actions == ()


def test_a_straggler_sets_the_condition_naming_rank_pod_and_node_and_restarts_nothing():
    s = spec()
    flagged = decide_with(s, running_status(s), GangHealth(1, stragglers=(SLOW,)))
    assert flagged.actions == () and flagged.status.phase == "Running"
    assert conditions(flagged.status)[cond.STRAGGLER] == ("True", reasons.STRAGGLER_DETECTED)
    [event] = [e for e in flagged.events if e.reason == reasons.STRAGGLER_DETECTED]
    assert "rank 1 (pod job-g1-1-x on node node-b)" in event.message
    cleared = decide_with(s, flagged.status, GangHealth(1))
    assert conditions(cleared.status)[cond.STRAGGLER] == ("False", reasons.NO_STRAGGLER)


def test_on_straggler_restarts_the_gang_when_asked():
    s = spec(restartPolicy={"onStraggler": True})
    restarted = decide_with(s, running_status(s), GangHealth(1, stragglers=(SLOW,)))
    assert restarted.actions == (DeleteWorkload(1, UID, broken=True),) and restarted.status.stall_restarts == 1


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
