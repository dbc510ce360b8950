"""lifecycle.create_refusal: a workload the API server refuses, one whose name is taken, one not seen yet."""

from datetime import timedelta

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.decision import CreateWorkload
from longctx_operator.observe import MISSING, WorkloadObservation
from support.lifecycle import T0, conditions, running, spec, step


def test_lost_create_is_repeated_for_the_same_generation():
    """The status names generation 1 but its Job is not there (operator died before creating it)."""
    admitted, _ = step(spec(), LongContextJobStatus())
    again, asked = step(spec(), admitted.status, MISSING, now=T0 + timedelta(seconds=1))
    assert not asked and again.actions == (CreateWorkload(1, admitted.actions[0].layout),)
    assert again.status.workload_generation == 1


QUOTA = "creating the workload failed: 403 Forbidden: exceeded quota: count/jobs.batch"


def refused(error=QUOTA):
    return WorkloadObservation(exists=False, create_error=error)


def test_a_refused_workload_is_in_the_status_and_retried():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    first, _ = step(s, admitted.status, refused(), now=T0 + timedelta(seconds=2))
    assert first.actions == (CreateWorkload(1, admitted.actions[0].layout),)
    assert (first.status.phase, first.status.reason, first.status.message) == (
        "Admitted",
        reasons.WORKLOAD_CREATE_FAILED,
        QUOTA,
    )
    assert conditions(first.status)[cond.WORKLOAD_CREATED] == ("False", reasons.WORKLOAD_CREATE_FAILED)
    assert [(e.type, e.reason, e.message) for e in first.events] == [("Warning", reasons.WORKLOAD_CREATE_FAILED, QUOTA)]
    assert first.requeue_after == pytest.approx(60.5)
    again, _ = step(s, first.status, refused(), now=T0 + timedelta(seconds=30))
    assert again.events == () and again.actions == first.actions  # one Event per refusal episode
    created, _ = step(s, again.status, running(created=T0 + timedelta(seconds=40)), now=T0 + timedelta(seconds=41))
    assert created.status.phase == "Running"
    assert conditions(created.status)[cond.WORKLOAD_CREATED] == ("True", reasons.CREATED)


def test_a_workload_refused_past_the_startup_timeout_restarts_then_fails():
    s = spec()  # startupTimeoutSeconds 60, maxRestarts 1, backoff 10 s
    status = step(s, LongContextJobStatus())[0].status
    status = step(s, status, refused(), now=T0 + timedelta(seconds=1))[0].status
    late, _ = step(s, status, refused(), now=T0 + timedelta(seconds=62))
    assert late.actions == ()  # its Job was never created: no object of that name is this job's to delete
    assert (late.status.phase, late.status.reason, late.status.restarts) == ("Restarting", reasons.STARTUP_TIMEOUT, 1)
    assert "not created within 60s" in late.status.message and "count/jobs.batch" in late.status.message
    # The next generation gets a whole startup timeout of its own before giving up.
    gen2, _ = step(s, late.status, MISSING, now=T0 + timedelta(seconds=73))
    assert gen2.actions == (CreateWorkload(2, gen2.actions[0].layout),)
    assert cond.WORKLOAD_CREATED not in conditions(gen2.status)
    status = step(s, gen2.status, refused(), now=T0 + timedelta(seconds=74))[0].status
    assert step(s, status, refused(), now=T0 + timedelta(seconds=130))[0].status.phase == "Admitted"
    final, _ = step(s, status, refused(), now=T0 + timedelta(seconds=135))
    assert (final.status.phase, final.status.reason) == ("Failed", reasons.STARTUP_TIMEOUT)
    assert "maxRestarts is 1" in final.status.message


def test_a_refusal_before_a_suspension_does_not_time_out_the_resumed_generation():
    s = spec()
    status = step(s, LongContextJobStatus())[0].status
    status = step(s, status, refused(), now=T0 + timedelta(seconds=1))[0].status
    status = step(spec(suspend=True), status, MISSING, now=T0 + timedelta(seconds=2))[0].status
    resumed, _ = step(s, status, MISSING, now=T0 + timedelta(seconds=600))
    assert resumed.actions == (CreateWorkload(2, resumed.actions[0].layout),)
    again, _ = step(s, resumed.status, refused(), now=T0 + timedelta(seconds=601))
    assert (again.status.phase, again.status.reason, again.status.restarts) == (
        "Admitted",
        reasons.WORKLOAD_CREATE_FAILED,
        0,
    )


TAKEN = "creating the workload failed: Job job-g1 already exists and is not owned by LongContextJob job"


def test_a_name_owned_by_someone_else_fails_the_job_and_deletes_nothing():
    """A colleague's Job is named like this job's generation: the refused create fails the job at
    once with its own reason; nothing is deleted, now or after the startup timeout, and no next
    generation takes another name."""
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    taken = WorkloadObservation(exists=False, create_error=TAKEN, name_taken=True)
    failed, _ = step(s, admitted.status, taken, now=T0 + timedelta(seconds=1))
    assert failed.actions == ()
    assert (failed.status.phase, failed.status.reason, failed.status.message) == ("Failed", reasons.NAME_TAKEN, TAKEN)
    assert failed.status.current_workload is None and failed.status.restarts == 0
    assert conditions(failed.status)[cond.WORKLOAD_CREATED] == ("False", reasons.NAME_TAKEN)
    assert conditions(failed.status)[cond.FAILED] == ("True", reasons.NAME_TAKEN)
    assert [(e.type, e.reason) for e in failed.events] == [("Warning", reasons.NAME_TAKEN)]
    later, _ = step(s, failed.status, taken, now=T0 + timedelta(seconds=600))
    assert later.actions == () and later.status == failed.status
