"""lifecycle.decide step by step: each test walks a job through the states the operator sees."""

from datetime import UTC, datetime, timedelta

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.admission import Admission
from longctx_operator.api.spec import API_REMAT_POLICY, TRAINER_ATTENTION, LongContextJobSpec
from longctx_operator.api.status import LongContextJobStatus, ProgressStatus
from longctx_operator.lifecycle.admit import ADMISSION_RETRY_SECONDS
from longctx_operator.lifecycle.decide import decide
from longctx_operator.lifecycle.decision import CreateWorkload, DeleteWorkload
from longctx_operator.lifecycle.gang_restart import BACKOFF_CAP_SECONDS, BACKOFF_FLOOR_SECONDS, restart_backoff
from longctx_operator.lifecycle.planning import resolved
from longctx_operator.observe import MISSING, KueueVerdict, RankFailure, WorkloadObservation

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UID = "job-g1-uid"
FITS = Admission(True, reasons.GANG_FITS, "2 of 4 free nodes")
NO_FIT = Admission(False, reasons.INSUFFICIENT_GPUS, "the gang needs 2 nodes; 1 available")


def spec(**over) -> LongContextJobSpec:
    base = {
        "model": {"preset": "tiny"},
        "sequenceLength": 4096,
        "steps": 10,
        "resources": {"nodes": 2, "gpusPerNode": 8, "gpuType": "h100-80gb"},
        "restartPolicy": {"maxRestarts": 1, "backoffSeconds": 10},
        "checkpoint": {"persistentVolumeClaim": "shared"},
        "scheduling": {"startupTimeoutSeconds": 60},
    }
    for key, value in over.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return LongContextJobSpec.model_validate(base)


def running(total=2, ready=2, created=T0):
    return WorkloadObservation(exists=True, uid=UID, created=created, total=total, running=total, ready=ready)


def step(s, status, observed=MISSING, now=T0, admission=FITS, spec_generation=1):
    asked = []

    def admit():
        asked.append(True)
        return admission

    decision = decide("job", s, spec_generation, status, observed, now, admit)
    return decision, bool(asked)


def conditions(status):
    return {c.type: (c.status, c.reason) for c in status.conditions}


def test_new_job_is_planned_admitted_and_created():
    d, asked = step(spec(), LongContextJobStatus())
    assert asked
    assert d.status.phase == "Admitted"
    assert (d.status.workload_generation, d.status.current_workload) == (1, "job-g1")
    assert (
        d.status.layout.processes == 2 and d.status.layout.data * d.status.layout.context * d.status.layout.tensor == 16
    )
    assert conditions(d.status) == {
        cond.LAYOUT_PLANNED: ("True", reasons.PLANNED),
        cond.ADMITTED: ("True", reasons.GANG_FITS),
    }
    assert d.actions == (CreateWorkload(1, d.actions[0].layout),)
    assert [e.reason for e in d.events] == [reasons.PLANNED, reasons.GANG_FITS]
    assert d.status.observed_generation == 1


def test_the_chosen_attention_is_recorded_and_rendered_again_from_the_status():
    auto = spec(parallelism={"attention": "auto"})
    d, _ = step(auto, LongContextJobStatus())
    chosen, group = d.status.layout.attention, d.status.layout.ulysses
    assert chosen in TRAINER_ATTENTION and (group is not None) == (chosen == "hybrid")
    assert d.actions[0].layout.attention == TRAINER_ATTENTION[chosen]
    assert d.actions[0].layout.ulysses == (group or 1)
    assert resolved(d.status.layout, auto) == d.actions[0].layout  # what a restart renders
    # A status recorded before the layout carried its attention: the spec's kind (auto: ring).
    old = d.status.layout.model_copy(update={"attention": None})
    assert resolved(old, spec(parallelism={"attention": "allGather"})).attention == "all_gather"
    assert resolved(old, auto).attention == "ring"


def test_the_chosen_remat_policy_is_recorded_and_rendered_again_from_the_status():
    d, _ = step(spec(), LongContextJobStatus())
    chosen = d.actions[0].layout.remat_policy
    assert d.status.layout.remat_policy == API_REMAT_POLICY[chosen]
    assert resolved(d.status.layout, spec()).remat_policy == chosen
    # A status recorded before the layout carried it: full remat, as the trainer ran then.
    assert resolved(d.status.layout.model_copy(update={"remat_policy": None}), spec()).remat_policy == "full"


def test_the_status_says_why_the_layout_was_chosen():
    from longctx_operator.lifecycle.planning import UNPLANNED_EXPLANATION

    auto, _ = step(spec(parallelism={"attention": "auto"}), LongContextJobStatus())
    assert auto.status.layout.explanation.startswith("fastest of ")
    assert auto.status.layout.explanation.endswith(" fitting layouts and attention kinds (auto)")
    assert auto.status.layout.estimated_tokens_per_second > 0 and auto.status.layout.memory_per_gpu
    cpu = spec(
        resources={"nodes": 2, "gpusPerNode": 1, "gpuType": "cpu"},
        parallelism={"mode": "manual", "data": 1, "context": 2, "tensor": 1},
    )
    assert step(cpu, LongContextJobStatus())[0].status.layout.explanation == UNPLANNED_EXPLANATION


def test_planning_warns_once_about_checkpoints_a_restart_cannot_find():
    s = spec(checkpoint={"persistentVolumeClaim": None})
    planned, _ = step(s, LongContextJobStatus())
    assert [(e.type, e.reason) for e in planned.events] == [
        ("Normal", reasons.PLANNED),
        ("Warning", reasons.CHECKPOINT_NOT_PERSISTENT),
        ("Normal", reasons.GANG_FITS),
    ]
    assert "2 different disks" in planned.events[1].message
    again, _ = step(s, planned.status, running(), now=T0 + timedelta(seconds=5))
    assert reasons.CHECKPOINT_NOT_PERSISTENT not in [e.reason for e in again.events]


def test_no_room_stays_pending_and_creates_nothing():
    d, _ = step(spec(), LongContextJobStatus(), admission=NO_FIT)
    assert (d.status.phase, d.status.reason) == ("Pending", reasons.INSUFFICIENT_GPUS)
    assert d.status.message == NO_FIT.message and d.actions == ()
    assert d.requeue_after == ADMISSION_RETRY_SECONDS
    assert d.events[-1].type == "Warning"
    again, _ = step(spec(), d.status, now=T0 + timedelta(seconds=5), admission=NO_FIT)
    assert again.events == () and again.actions == ()
    later, _ = step(spec(), again.status, now=T0 + timedelta(seconds=10))
    assert later.status.phase == "Admitted" and later.actions[0].generation == 1


def test_planner_rejection_fails_the_job():
    bad = spec(
        sequenceLength=4096,
        resources={"nodes": 1, "gpusPerNode": 8},
        parallelism={"mode": "manual", "data": 1, "context": 3, "tensor": 1},
    )
    d, asked = step(bad, LongContextJobStatus())
    assert not asked and d.actions == ()
    assert (d.status.phase, d.status.reason) == ("Failed", reasons.PLAN_FAILED)
    assert conditions(d.status)[cond.LAYOUT_PLANNED][0] == "False"


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


def test_lost_create_is_repeated_for_the_same_generation():
    """The status names generation 1 but its Job is not there (operator died before creating it)."""
    admitted, _ = step(spec(), LongContextJobStatus())
    again, asked = step(spec(), admitted.status, MISSING, now=T0 + timedelta(seconds=1))
    assert not asked and again.actions == (CreateWorkload(1, admitted.actions[0].layout),)
    assert again.status.workload_generation == 1


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


def test_a_setting_the_operator_does_not_allow_holds_the_job_pending():
    why = "spec.scheduling.priorityClassName system-node-critical is not allowed by the operator's ..."
    held = decide("job", spec(), 1, LongContextJobStatus(), MISSING, T0, lambda: FITS, settings_error=why)
    assert (held.status.phase, held.status.reason, held.status.message) == ("Pending", reasons.SETTING_NOT_ALLOWED, why)
    assert held.actions == () and held.requeue_after is None
    assert conditions(held.status)[cond.ADMITTED] == ("False", reasons.SETTING_NOT_ALLOWED)
    assert ("Warning", reasons.SETTING_NOT_ALLOWED) in [(e.type, e.reason) for e in held.events]
    allowed, _ = step(spec(), held.status)
    assert allowed.status.phase == "Admitted" and allowed.actions[0].generation == 1


def test_startup_timeout_counts_as_a_failure():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    pending = WorkloadObservation(exists=True, uid=UID, created=T0, total=2, running=1)
    waiting, _ = step(s, admitted.status, pending, now=T0 + timedelta(seconds=50))
    assert waiting.actions == () and waiting.requeue_after == pytest.approx(10.5)
    late, _ = step(s, waiting.status, pending, now=T0 + timedelta(seconds=61))
    assert late.actions == (DeleteWorkload(1, UID, broken=True),)
    assert (late.status.phase, late.status.reason) == ("Restarting", reasons.STARTUP_TIMEOUT)
    assert "1 of 2 ranks Running after 60s" in late.status.message


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


def test_suspend_deletes_and_resume_creates_the_next_generation():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    suspended, _ = step(spec(suspend=True), run.status, running(), spec_generation=2)
    assert suspended.actions == (DeleteWorkload(1, UID),)
    assert suspended.status.phase == "Suspended" and suspended.status.current_workload is None
    assert conditions(suspended.status)[cond.RUNNING] == ("False", reasons.SUSPENDED)
    still, _ = step(spec(suspend=True), suspended.status, MISSING, spec_generation=2)
    assert still.actions == () and still.events == ()
    resumed, _ = step(s, still.status, MISSING, spec_generation=3)
    assert resumed.actions == (CreateWorkload(2, admitted.actions[0].layout),)
    assert resumed.status.restarts == 0 and conditions(resumed.status)[cond.SUSPENDED] == ("False", reasons.RESUMED)


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


def test_an_admission_mode_the_operator_refuses_holds_the_job_with_its_reason():
    why = "scheduling.admission none is not allowed by this operator's configuration (admissionModes: kueue)"
    d = decide("job", spec(), 1, LongContextJobStatus(), MISSING, T0, lambda: FITS, admission_error=why)
    assert d.actions == () and (d.status.phase, d.status.reason, d.status.message) == (
        "Pending",
        reasons.ADMISSION_NOT_ALLOWED,
        why,
    )
    assert conditions(d.status)[cond.ADMITTED] == ("False", reasons.ADMISSION_NOT_ALLOWED)
    assert ("Warning", reasons.ADMISSION_NOT_ALLOWED) in [(e.type, e.reason) for e in d.events]
    allowed = decide("job", spec(), 2, d.status, MISSING, T0, lambda: FITS)
    assert allowed.status.phase == "Admitted" and allowed.actions[0].generation == 1


def test_admission_none_creates_at_once():
    d, asked = step(spec(scheduling={"admission": "none"}), LongContextJobStatus())
    assert not asked and d.status.phase == "Admitted" and d.actions[0].generation == 1


def test_spec_change_is_replanned_for_the_next_generation_only():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    changed, _ = step(spec(steps=20), run.status, running(), spec_generation=2)
    assert changed.actions == () and changed.status.observed_generation == 2
    assert changed.status.phase == "Running" and changed.status.workload_generation == 1


def test_a_network_outside_the_allow_list_holds_the_job_and_creates_nothing():
    s = spec()
    why = 'spec.network.networks[0]: "vpc0" is not allowed in namespace team'
    held = decide("job", s, 1, LongContextJobStatus(), MISSING, T0, lambda: FITS, network_error=why)
    assert held.actions == () and held.requeue_after is None  # waits for the spec or the allow-list
    assert (held.status.phase, held.status.reason, held.status.message) == ("Pending", reasons.NETWORK_NOT_ALLOWED, why)
    assert conditions(held.status)[cond.ADMITTED] == ("False", reasons.NETWORK_NOT_ALLOWED)
    assert ("Warning", reasons.NETWORK_NOT_ALLOWED, why) in [(e.type, e.reason, e.message) for e in held.events]
    again = decide("job", s, 1, held.status, MISSING, T0 + timedelta(seconds=5), lambda: FITS, network_error=why)
    assert again.events == () and again.actions == ()  # no Event storm while it waits
    allowed, asked = step(s, again.status, now=T0 + timedelta(seconds=9))
    assert asked and allowed.actions and conditions(allowed.status)[cond.ADMITTED] == ("True", reasons.GANG_FITS)


HOSTILE = "boom\x1b[2J\x1b[H\rFAKE: Succeeded\nnext\u202eesrever\x00\x7f\x85\u2028end\t!"


def test_text_from_pods_and_kueue_reaches_status_and_events_without_control_characters():
    """A trainer image picks its own termination reason, and Kueue and the API server quote names
    and values: terminal escapes, carriage returns, line breaks or bidi overrides in them must not
    reach what `kubectl describe` prints."""
    s = spec(restartPolicy={"maxRestarts": 0})
    admitted, _ = step(s, LongContextJobStatus())
    hostile = WorkloadObservation(
        exists=True, created=T0, total=2, running=1, failed=1, failure=RankFailure(1, "job-g1-1-x", HOSTILE)
    )
    failed, _ = step(s, admitted.status, hostile)
    kueue = spec(scheduling={"admission": "kueue", "queueName": "q"})
    queued, _ = step(kueue, LongContextJobStatus())
    waiting = WorkloadObservation(
        exists=True, suspended=True, created=T0, total=2, kueue=KueueVerdict(False, "Pending\x1b[31m", HOSTILE)
    )
    quoted, _ = step(kueue, queued.status, waiting)
    refused = WorkloadObservation(exists=False, create_error=f"creating the workload failed: 422 {HOSTILE}")
    create_failed, _ = step(s, admitted.status, refused)
    for decision in (failed, quoted, create_failed):
        texts = [decision.status.message] + [c.message or "" for c in decision.status.conditions]
        texts += [e.message for e in decision.events]
        assert "FAKE: Succeeded" in decision.status.message and "end !" in decision.status.message
        assert all(text.isprintable() for text in texts), texts
