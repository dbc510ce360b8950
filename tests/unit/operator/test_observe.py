"""observe_workload: an Indexed Job and its pods -> ranks, completion and the first failed rank."""

from datetime import UTC, datetime

from longctx_operator.observe import (
    KUEUE_MESSAGE_MAX,
    MISSING,
    KueueVerdict,
    ended,
    exit_reason,
    kueue_verdict,
    observe_workload,
    parse_time,
    serving,
)


def job(completions=2, conditions=(), suspend=False, deleting=False):
    meta = {"name": "j-g1", "creationTimestamp": "2026-01-02T03:04:05Z"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:05:00Z"
    return {
        "metadata": meta,
        "spec": {"completions": completions, "parallelism": completions, "suspend": suspend},
        "status": {"conditions": [{"type": t, "status": "True", "reason": r, "message": m} for t, r, m in conditions]},
    }


def pod(rank, phase="Running", ready=True, exit_code=None, deleting=False):
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if exit_code is not None:
        status["containerStatuses"] = [
            {
                "name": "trainer",
                "state": {"terminated": {"exitCode": exit_code, "reason": "Error" if exit_code else "Completed"}},
            }
        ]
    meta = {"name": f"j-g1-{rank}-abc", "labels": {"batch.kubernetes.io/job-completion-index": str(rank)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:05:00Z"
    return {"metadata": meta, "status": status}


def test_missing_job_is_not_there():
    assert observe_workload(None, [pod(0)]) == MISSING
    assert not MISSING.exists


def test_counts_running_and_ready_ranks():
    seen = observe_workload(job(3), [pod(0), pod(1, ready=False), pod(2, phase="Pending", ready=False)])
    assert (seen.exists, seen.total, seen.running, seen.ready, seen.failed) == (True, 3, 2, 1, 0)
    assert not seen.all_running and not seen.all_ready and seen.failure is None
    assert seen.created == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_all_running_and_ready():
    seen = observe_workload(job(2), [pod(0), pod(1)])
    assert seen.all_running and seen.all_ready


def test_pods_being_deleted_do_not_count():
    seen = observe_workload(job(2), [pod(0), pod(1, deleting=True)])
    assert seen.running == 1 and not seen.all_running


def test_lowest_failed_rank_is_named_with_its_exit_code():
    seen = observe_workload(job(4), [pod(0), pod(3, "Failed", False, 7), pod(2, "Failed", False, 9)])
    assert seen.failed == 2
    assert (seen.failure.rank, seen.failure.pod) == (2, "j-g1-2-abc")
    assert seen.failure.describe() == "rank 2 (pod j-g1-2-abc) failed: container trainer terminated: Error, exit code 9"


def test_job_failed_condition_without_a_failed_pod():
    seen = observe_workload(job(2, conditions=[("Failed", "DeadlineExceeded", "too slow")]), [])
    assert seen.failure.rank is None
    assert "DeadlineExceeded" in seen.failure.describe() and "too slow" in seen.failure.describe()


def test_complete_condition_and_succeeded_pods():
    seen = observe_workload(
        job(2, conditions=[("Complete", "", "")]), [pod(0, "Succeeded", False, 0), pod(1, "Succeeded", False, 0)]
    )
    assert seen.complete and seen.succeeded == 2 and seen.failure is None


def test_suspended_and_deleting_jobs():
    assert observe_workload(job(suspend=True), []).suspended
    assert observe_workload(job(deleting=True), []).deleting


def test_exit_reason_falls_back_to_the_pod_reason():
    assert exit_reason({"status": {"phase": "Failed", "reason": "Evicted"}}) == "Evicted"


def test_parse_time():
    assert parse_time(None) is None
    assert parse_time("2026-11-20T22:00:01Z").second == 1


def kueue_workload(*conditions):
    return {
        "status": {"conditions": [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]}
    }


def test_kueues_pending_reason_comes_from_quota_reserved_false():
    pending = kueue_workload(
        ("QuotaReserved", "False", "Pending", "couldn't assign flavors to pod set main:\n insufficient quota"),
    )
    verdict = observe_workload(job(suspend=True), [], pending).kueue
    assert verdict == KueueVerdict(False, "Pending", "couldn't assign flavors to pod set main: insufficient quota")
    assert verdict.describe() == "Pending: couldn't assign flavors to pod set main: insufficient quota"


def test_an_eviction_outranks_the_pending_quota_and_an_admitted_workload_says_nothing():
    evicted = kueue_workload(
        ("QuotaReserved", "False", "Pending", "waiting"),
        ("Evicted", "True", "Preempted", "Preempted to accommodate a workload"),
    )
    assert kueue_verdict(evicted) == KueueVerdict(True, "Preempted", "Preempted to accommodate a workload")
    admitted = kueue_workload(("QuotaReserved", "True", "QuotaReserved", ""), ("Evicted", "False", "Preempted", ""))
    assert kueue_verdict(admitted) is None
    assert kueue_verdict(None) is None and observe_workload(job(), []).kueue is None


def test_a_long_kueue_message_is_cut_to_fit_the_status():
    long = kueue_workload(("QuotaReserved", "False", "Pending", "insufficient quota; " * 200))
    message = kueue_verdict(long).message
    assert len(message) == KUEUE_MESSAGE_MAX and message.endswith("...")


def test_a_pod_has_ended_in_phase_succeeded_or_failed_only():
    """The one test of a pod's end that admission, occupancy, placement and the watch all use."""
    phases = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
    assert [ended({"status": {"phase": p}}) for p in phases] == [False, False, True, True, False]
    assert not ended({}) and not serving({"status": {"phase": "Failed"}})
