"""operator/preemption.py and its hooks: the grace period a pod gets to save, the Job's pod failure
policy, a preempted rank told from a failed one (observe), and the lifecycle's decisions on
recorded observations: a preemption in place and a failure both say why in status.lastRestart."""

from datetime import timedelta
from pathlib import Path

import yaml

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.spec import LongContextJob, LongContextJobSpec
from longctx_operator.api.status import LongContextJobStatus, ProgressStatus
from longctx_operator.lifecycle.decision import DeleteWorkload
from longctx_operator.observe import RankFailure, WorkloadObservation, observe_workload
from longctx_operator.preemption import grace_period_seconds
from longctx_operator.render.workload import render_workload
from longctx_operator.resolve import resolve_layout
from longctx_trainer.contract.termination import PREEMPTED_EXIT_CODE, PREEMPTED_MESSAGE
from support.lifecycle import T0, UID, conditions, running, step
from support.lifecycle import spec as lifecycle_spec

EXAMPLES = Path(__file__).parents[3] / "examples"


def spec(**scheduling) -> LongContextJobSpec:
    """The lifecycle tests' job, 100 steps, admitted with no admission check."""
    return lifecycle_spec(steps=100, scheduling={"admission": "none", **scheduling})


def _job(name: str) -> LongContextJob:
    return LongContextJob.model_validate(yaml.safe_load((EXAMPLES / name).read_text()))


def test_the_grace_period_holds_a_step_and_a_checkpoint_write_with_a_margin():
    job = _job("llama3-8b-128k-infiniband-nvshmem.yaml")
    layout, plan = resolve_layout(job.spec)
    # Llama 3 8B (8.03e9 parameters) x 12 bytes over 4 nodes at 1 GB/s: 24.1 s of writing; the
    # planner's step 10.7 s (remat policy save_attention); twice both, plus 30 s, rounded up.
    assert round(layout.step_seconds, 1) == 10.7
    assert grace_period_seconds(job.spec, layout) == 100
    pod = render_workload(job, layout).job["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 100
    raw = yaml.safe_load((EXAMPLES / "llama3-8b-128k-infiniband-nvshmem.yaml").read_text())
    raw["spec"]["checkpoint"]["preemptionGraceSeconds"] = 600  # the spec overrides the estimate
    job = LongContextJob.model_validate(raw)
    assert render_workload(job, layout).job["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 600


def test_a_cpu_job_without_a_plan_assumes_a_minute_per_step():
    job = _job("quickstart.yaml")
    layout, _ = resolve_layout(job.spec)
    assert layout.step_seconds is None
    assert grace_period_seconds(job.spec, layout) == 151  # 30 + 2 x (60 + a tiny model's write)


def test_the_job_ignores_the_preempted_exit_code_of_the_trainer_alone():
    job = _job("quickstart.yaml")
    rendered = render_workload(job, resolve_layout(job.spec)[0]).job["spec"]
    assert rendered["backoffLimit"] == 0  # any other exit fails the Job: the operator restarts the gang
    # ... so does any failed index; the replacement's wait is per index, not 10 s x 2^(ranks - 1)
    assert (rendered["backoffLimitPerIndex"], rendered["maxFailedIndexes"]) == (0, 0)
    assert rendered["podFailurePolicy"] == {
        "rules": [
            {
                "action": "Ignore",
                "onExitCodes": {"containerName": "trainer", "operator": "In", "values": [PREEMPTED_EXIT_CODE]},
            }
        ]
    }


def _pod(rank: int, phase: str, exit_code: int | None = None, message: str = "", finished: str = "", name=None):
    status: dict = {"phase": phase}
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "message": message, "finishedAt": finished, "reason": "Error"}
        status["containerStatuses"] = [{"name": "trainer", "state": {"terminated": terminated}}]
    labels = {"batch.kubernetes.io/job-completion-index": str(rank)}
    return {"metadata": {"name": name or f"job-g1-{rank}-x", "labels": labels}, "status": status}


JOB = {"metadata": {"uid": UID, "creationTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"completions": 2}}


def test_a_rank_that_exits_preempted_is_no_failure_and_names_its_step():
    saved = PREEMPTED_MESSAGE.format(step=37)
    observed = observe_workload(
        JOB,
        [
            _pod(0, "Failed", PREEMPTED_EXIT_CODE, saved, "2026-01-01T00:10:00Z"),
            _pod(1, "Failed", PREEMPTED_EXIT_CODE, saved, "2026-01-01T00:10:02Z"),
            _pod(0, "Pending", name="job-g1-0-new"),
        ],
    )
    assert observed.failure is None and observed.failed == 0
    assert (observed.preemption.rank, observed.preemption.step) == (1, 37)  # the one that ended last
    assert "every rank saved step 37" in observed.preemption.describe()
    crashed = observe_workload(JOB, [_pod(0, "Failed", 1), _pod(1, "Failed", PREEMPTED_EXIT_CODE, saved)])
    assert crashed.failure is not None and crashed.failure.rank == 0 and crashed.failed == 1
    unsaid = observe_workload(JOB, [_pod(1, "Failed", PREEMPTED_EXIT_CODE, "killed")])
    assert unsaid.failure is None and unsaid.preemption.step == -1


def _preempted_at(seconds: int, step_saved: int = 37) -> WorkloadObservation:
    at = (T0 + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")
    saved = PREEMPTED_MESSAGE.format(step=step_saved)
    return observe_workload(
        JOB, [_pod(0, "Failed", PREEMPTED_EXIT_CODE, saved, at), _pod(1, "Pending", name="job-g1-1-new")]
    )


def test_a_preemption_in_place_restarts_no_generation_and_counts_no_restart():
    s = spec()
    created, _ = step(s, LongContextJobStatus())
    run, _ = step(s, created.status, running(), now=T0 + timedelta(seconds=5))
    assert run.status.phase == "Running"
    later = T0 + timedelta(minutes=10)
    preempted, _ = step(s, run.status, _preempted_at(600), now=later)
    assert preempted.actions == ()  # the same Job replaces the pods
    assert (preempted.status.phase, preempted.status.reason) == ("Starting", reasons.PREEMPTED)
    assert preempted.status.restarts == 0 and preempted.status.workload_generation == 1
    assert conditions(preempted.status)[cond.RUNNING] == ("False", reasons.PREEMPTED)
    last = preempted.status.last_restart
    assert (last.reason, last.checkpoint_step, last.time) == (reasons.PREEMPTED, 37, "2026-01-01T00:10:00Z")
    # The startup clock runs from the preemption, not from the Job's creation 10 minutes ago ...
    waiting, _ = step(s, preempted.status, _preempted_at(600), now=later + timedelta(seconds=30))
    assert waiting.actions == () and waiting.status == preempted.status  # ... and it is recorded once
    # ... and it runs out like any start.
    late, _ = step(s, preempted.status, _preempted_at(600), now=later + timedelta(seconds=61))
    assert late.status.reason == reasons.STARTUP_TIMEOUT and late.status.restarts == 1
    resumed, _ = step(s, preempted.status, running(), now=later + timedelta(seconds=40))
    assert resumed.status.phase == "Running" and resumed.status.last_restart == last
    # The preempted pod stays listed beside its replacements: recorded once, the gang keeps Running.
    at = "2026-01-01T00:10:00Z"
    listed = [_pod(0, "Failed", PREEMPTED_EXIT_CODE, PREEMPTED_MESSAGE.format(step=37), at)]
    listed += [_pod(0, "Running", name="job-g1-0-new"), _pod(1, "Running", name="job-g1-1-new")]
    still, _ = step(s, resumed.status, observe_workload(JOB, listed), now=later + timedelta(minutes=1))
    assert still.status.phase == "Running" and still.events == ()
    again, _ = step(s, resumed.status, _preempted_at(900, 52), now=later + timedelta(minutes=5))
    assert again.status.reason == reasons.PREEMPTED and again.status.last_restart.checkpoint_step == 52


def test_a_gang_restart_records_its_reason_and_the_checkpoint_it_resumes_from():
    s = spec()
    created, _ = step(s, LongContextJobStatus())
    run, _ = step(s, created.status, running(), now=T0 + timedelta(seconds=5))
    run = run.status.model_copy(update={"progress": ProgressStatus(step=64, last_checkpoint_step=50)})
    failure = RankFailure(1, "job-g1-1-x", "container trainer terminated: Error, exit code 1")
    broken = WorkloadObservation(exists=True, uid=UID, created=T0, total=2, running=1, failed=1, failure=failure)
    restarted, _ = step(s, run, broken, now=T0 + timedelta(minutes=3))
    assert restarted.actions == (DeleteWorkload(1, UID, broken=True),) and restarted.status.restarts == 1
    last = restarted.status.last_restart
    assert (last.reason, last.checkpoint_step, last.time) == (reasons.RANK_FAILED, 50, "2026-01-01T00:03:00Z")
    assert "rank 1 (pod job-g1-1-x) failed" in last.message
