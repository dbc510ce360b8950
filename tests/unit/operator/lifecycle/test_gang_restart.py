"""lifecycle.gang_restart: a failed rank restarts the gang after a growing backoff, up to maxRestarts."""

from datetime import timedelta

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.decision import CreateWorkload, DeleteWorkload
from longctx_operator.lifecycle.gang_restart import BACKOFF_CAP_SECONDS, BACKOFF_FLOOR_SECONDS, restart_backoff
from longctx_operator.observe import MISSING, RankFailure, WorkloadObservation
from support.lifecycle import T0, UID, conditions, running, spec, step


def failed_rank():
    return WorkloadObservation(
        exists=True,
        uid=UID,
        created=T0,
        total=2,
        running=1,
        failed=1,
        failure=RankFailure(1, "job-g1-1-x", "container trainer terminated: Error, exit code 7"),
    )


def test_failed_rank_restarts_the_gang_after_backoff():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    failed, _ = step(s, run.status, failed_rank(), now=T0 + timedelta(seconds=5))
    assert failed.actions == (DeleteWorkload(1, UID, broken=True),)
    assert (failed.status.phase, failed.status.restarts, failed.status.current_workload) == ("Restarting", 1, None)
    assert conditions(failed.status)[cond.RESTARTING][0] == "True"
    assert "rank 1" in failed.status.message and "exit code 7" in failed.status.message
    assert failed.requeue_after == 10
    deleting, _ = step(
        s,
        failed.status,
        WorkloadObservation(exists=True, uid=UID, deleting=True, total=2),
        now=T0 + timedelta(seconds=6),
    )
    assert deleting.actions == () and deleting.status.phase == "Restarting"
    waiting, asked = step(s, deleting.status, MISSING, now=T0 + timedelta(seconds=9))
    assert not asked and waiting.actions == () and waiting.requeue_after == pytest.approx(6)
    next_gen, asked = step(s, waiting.status, MISSING, now=T0 + timedelta(seconds=16))
    assert asked and next_gen.actions == (CreateWorkload(2, admitted.actions[0].layout),)
    assert (next_gen.status.workload_generation, next_gen.status.current_workload) == (2, "job-g2")
    recovered, _ = step(s, next_gen.status, running(), now=T0 + timedelta(seconds=17))
    assert recovered.status.phase == "Running" and recovered.status.restarts == 1
    assert conditions(recovered.status)[cond.RESTARTING] == ("False", reasons.RECOVERED)


def test_failing_every_time_fails_after_max_restarts():
    s = spec()
    status = step(s, LongContextJobStatus())[0].status
    status = step(s, status, failed_rank())[0].status
    status = step(s, status, MISSING, now=T0 + timedelta(seconds=20))[0].status
    final, _ = step(s, status, failed_rank(), now=T0 + timedelta(seconds=25))
    assert final.actions == (DeleteWorkload(2, UID, broken=True),)
    assert (final.status.phase, final.status.reason, final.status.restarts) == ("Failed", reasons.RANK_FAILED, 1)
    assert "rank 1 (pod job-g1-1-x) failed: container trainer terminated: Error, exit code 7" in final.status.message
    assert "maxRestarts is 1" in final.status.message
    assert conditions(final.status)[cond.FAILED] == ("True", reasons.RANK_FAILED)


def test_an_instantly_failing_gang_backs_off_from_a_floor_doubling_each_restart():
    """backoffSeconds 0 and many restarts must not churn pods as fast as they fail (docs/security.md)."""
    s = spec(restartPolicy={"maxRestarts": 500, "backoffSeconds": 0})
    status, now, waits = step(s, LongContextJobStatus())[0].status, T0, []
    for generation in range(1, 6):
        failed, _ = step(s, status, failed_rank(), now=now)
        waits.append(failed.requeue_after)
        early, asked = step(s, failed.status, MISSING, now=now + timedelta(seconds=failed.requeue_after * 0.9))
        assert not asked and early.actions == ()  # still backing off
        now += timedelta(seconds=failed.requeue_after)
        status = step(s, early.status, MISSING, now=now)[0].status
        assert status.workload_generation == generation + 1
    assert waits == [BACKOFF_FLOOR_SECONDS * 2**k for k in range(5)]


def test_restart_backoff_grows_to_a_cap_unless_the_job_asks_for_longer():
    assert [restart_backoff(spec(), k) for k in (1, 2, 3)] == [10, 20, 40]
    assert restart_backoff(spec(), 1000) == BACKOFF_CAP_SECONDS
    slow = spec(restartPolicy={"backoffSeconds": 3600})
    assert restart_backoff(slow, 1) == restart_backoff(slow, 50) == 3600
    described = LongContextJobSpec.model_fields["restart_policy"].annotation.model_fields["backoff_seconds"]
    assert f"at least {BACKOFF_FLOOR_SECONDS:g} s" in described.description
    assert f"up to {BACKOFF_CAP_SECONDS / 60:g} minutes" in " ".join(described.description.split())
