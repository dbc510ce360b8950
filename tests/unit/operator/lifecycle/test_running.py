"""lifecycle.running: a gang whose ranks all run is Running, then Succeeded when every rank completed."""

from datetime import timedelta

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus, ProgressStatus
from longctx_operator.observe import MISSING, WorkloadObservation
from support.lifecycle import T0, UID, conditions, running, spec, step


def test_admitted_to_running_to_succeeded():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    starting, _ = step(s, admitted.status, WorkloadObservation(exists=True, uid=UID, created=T0, total=2, running=1))
    assert starting.status.phase == "Starting" and starting.actions == ()
    run, _ = step(s, starting.status, running(ready=1), now=T0 + timedelta(seconds=2))
    assert run.status.phase == "Running" and cond.RENDEZVOUS not in conditions(run.status)
    ready, _ = step(s, run.status, running(), now=T0 + timedelta(seconds=3))
    assert conditions(ready.status)[cond.RENDEZVOUS] == ("True", reasons.ALL_RANKS_READY)
    assert ready.status.workers.ready == 2 and ready.status.start_time == "2026-01-01T00:00:02Z"
    done, _ = step(s, ready.status, WorkloadObservation(exists=True, uid=UID, total=2, succeeded=2, complete=True))
    assert done.status.phase == "Succeeded" and done.actions == ()
    assert conditions(done.status)[cond.SUCCEEDED] == ("True", reasons.COMPLETED)
    assert conditions(done.status)[cond.RUNNING] == ("False", reasons.COMPLETED)
    # One Event per transition: Running, Rendezvous and Succeeded change together on completion.
    assert [e.reason for e in run.events + ready.events + done.events] == [
        reasons.ALL_RANKS_RUNNING,
        reasons.ALL_RANKS_READY,
        reasons.COMPLETED,
    ]
    assert done.events[-1].message == "all 2 ranks completed"
    assert step(s, done.status, MISSING)[0].actions == ()  # terminal


def test_success_completes_the_progress_that_reads_capped():
    """A Running job's reads stop at 99.9 % with no ETA at the last step; success says 100 %."""
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    read = run.status.model_copy(
        update={
            "progress": ProgressStatus(step=s.steps, percent_complete=99.9, eta="1s", estimated_completion_time="x")
        }
    )
    done, _ = step(s, read, WorkloadObservation(exists=True, uid=UID, total=2, succeeded=2, complete=True))
    assert done.status.phase == "Succeeded"
    assert (done.status.progress.percent_complete, done.status.progress.eta) == (100.0, None)
    assert done.status.progress.estimated_completion_time is None and done.status.progress.step == s.steps
