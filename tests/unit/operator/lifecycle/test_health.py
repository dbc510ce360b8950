"""lifecycle.health, on the watchdog's verdicts (stall.py, straggler.py): a stall restarts the gang,
counted apart from failures; a straggler sets a condition and restarts nothing unless
restartPolicy.onStraggler asks."""

from datetime import timedelta

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.lifecycle.decision import DeleteWorkload
from longctx_operator.observe import WorkloadObservation
from longctx_operator.stall import GangHealth, RankTrack, Stall
from longctx_operator.straggler import Straggler
from support.lifecycle import T0, UID, conditions, decide_with, running_status, spec, step

STOPPED = RankTrack(1, "job-g1-1-x", "node-b", "training", 40, 1.0, False, 0.0, 0.0)
STALL = Stall((STOPPED,), 65.0, 60.0, startup=False)
SLOW = Straggler(1, "job-g1-1-x", "node-b", 3.0, 1.0)


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
