"""lifecycle.kueue: jobs admitted, held back and evicted by Kueue."""

from datetime import timedelta

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.observe import KueueVerdict, WorkloadObservation
from support.lifecycle import T0, UID, conditions, running, spec, step


def test_kueue_creates_suspended_and_waits_for_kueue():
    s = spec(scheduling={"admission": "kueue", "queueName": "team-a"})
    queued, asked = step(s, LongContextJobStatus())
    assert not asked and queued.actions[0].generation == 1
    assert (queued.status.phase, conditions(queued.status)[cond.ADMITTED]) == (
        "Pending",
        ("False", reasons.QUEUED_IN_KUEUE),
    )
    held = WorkloadObservation(exists=True, uid=UID, suspended=True, created=T0, total=2)
    waiting, _ = step(s, queued.status, held, now=T0 + timedelta(hours=1))
    assert waiting.actions == () and waiting.status.phase == "Pending"
    unsuspended, _ = step(s, waiting.status, running(), now=T0 + timedelta(hours=1, seconds=1))
    assert unsuspended.status.phase == "Running"
    assert conditions(unsuspended.status)[cond.ADMITTED] == ("True", reasons.ADMITTED_BY_KUEUE)


def test_kueue_taking_a_running_job_back_keeps_the_job_and_resumes_it_when_kueue_admits_it_again():
    """Kueue preempts by re-suspending the Job: the job must not stay Running with no pods. The same
    Job stays (its ranks save on SIGTERM), so Kueue's requeue backoff and limit apply to its
    Workload; no generation is made and no restart counts; Kueue's unsuspend starts it again."""
    s = spec(scheduling={"admission": "kueue", "queueName": "team-a"})
    queued, _ = step(s, LongContextJobStatus())
    run, _ = step(s, queued.status, running(), now=T0 + timedelta(seconds=1))
    assert run.status.phase == "Running"
    preempted = WorkloadObservation(exists=True, uid=UID, suspended=True, created=T0, total=2)
    evicted, _ = step(s, run.status, preempted, now=T0 + timedelta(minutes=5))
    assert evicted.actions == ()
    assert (evicted.status.phase, evicted.status.reason) == ("Pending", reasons.EVICTED_BY_KUEUE)
    assert conditions(evicted.status)[cond.RUNNING] == ("False", reasons.EVICTED_BY_KUEUE)
    assert conditions(evicted.status)[cond.ADMITTED] == ("False", reasons.EVICTED_BY_KUEUE)
    assert evicted.status.current_workload == "job-g1" and evicted.status.restarts == 0
    assert evicted.status.last_restart.reason == reasons.EVICTED_BY_KUEUE
    assert ("Warning", reasons.EVICTED_BY_KUEUE) in [(e.type, e.reason) for e in evicted.events]
    backoff = KueueVerdict(True, "Preempted", "Preempted to accommodate a higher priority Workload", "requeued 1 time")
    held = WorkloadObservation(exists=True, uid=UID, suspended=True, created=T0, total=2, kueue=backoff)
    waiting, _ = step(s, evicted.status, held, now=T0 + timedelta(minutes=5, seconds=2))
    assert waiting.actions == () and waiting.status.reason == reasons.EVICTED_BY_KUEUE
    assert "Kueue: Preempted: Preempted to accommodate" in waiting.status.message
    assert "requeued 1 time" in waiting.status.message  # Kueue's backoff, in the status
    again, _ = step(s, waiting.status, running(), now=T0 + timedelta(minutes=6))
    assert again.actions == () and again.status.phase == "Running"
    assert again.status.workload_generation == 1 and again.status.restarts == 0
    assert conditions(again.status)[cond.ADMITTED] == ("True", reasons.ADMITTED_BY_KUEUE)


def test_a_queued_job_shows_kueues_own_reason_for_not_admitting_it():
    s = spec(scheduling={"admission": "kueue", "queueName": "team-a"})
    queued, _ = step(s, LongContextJobStatus())
    quota = KueueVerdict(False, "Pending", "couldn't assign flavors to pod set main: insufficient unused quota")
    held = WorkloadObservation(exists=True, uid=UID, suspended=True, created=T0, total=2, kueue=quota)
    waiting, _ = step(s, queued.status, held, now=T0 + timedelta(seconds=5))
    assert waiting.actions == () and waiting.status.phase == "Pending"
    assert conditions(waiting.status)[cond.ADMITTED] == ("False", reasons.QUEUED_IN_KUEUE)
    assert waiting.status.reason == reasons.QUEUED_IN_KUEUE
    assert "Kueue: Pending: couldn't assign flavors" in waiting.status.message
    assert "LocalQueue team-a" in waiting.status.message
    assert waiting.events == ()  # the condition stays False: a new message is no transition


def test_an_eviction_names_kueues_reason_and_counts_no_restart():
    s = spec(scheduling={"admission": "kueue", "queueName": "team-a"})
    queued, _ = step(s, LongContextJobStatus())
    run, _ = step(s, queued.status, running(), now=T0 + timedelta(seconds=1))
    why = KueueVerdict(True, "PodsReadyTimeout", "Exceeded the PodsReady timeout default/job-g1")
    taken = WorkloadObservation(exists=True, uid=UID, suspended=True, created=T0, total=2, kueue=why)
    evicted, _ = step(s, run.status, taken, now=T0 + timedelta(minutes=1))
    assert evicted.status.reason == reasons.EVICTED_BY_KUEUE and evicted.status.restarts == 0
    assert "evicted it: PodsReadyTimeout: Exceeded the PodsReady timeout" in evicted.status.message
    assert evicted.actions == ()
