"""operator/reconciler.py's own pieces: status patches, pod annotations, admission counting,
refusals, retry backoff and which events wake which jobs."""

import asyncio

from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus, ProgressStatus
from longctx_operator.config import OperatorConfig
from longctx_operator.reconciler import add_pod_annotations, status_patch


def test_status_patch_removes_cleared_fields_and_leaves_progress_alone():
    old = {"phase": "Running", "currentWorkload": "j-g1", "restarts": 0, "progress": {"step": 3}}
    new = LongContextJobStatus(phase="Restarting", restarts=1, progress=ProgressStatus(step=1))
    patch = status_patch(old, new)
    assert patch["phase"] == "Restarting" and patch["restarts"] == 1
    assert patch["currentWorkload"] is None
    assert "progress" not in patch


def test_status_patch_writes_the_progress_of_a_job_that_succeeded():
    old = {"phase": "Running", "progress": {"step": 10, "percentComplete": 99.9, "eta": "1s"}}
    new = LongContextJobStatus(phase="Succeeded", progress=ProgressStatus(step=10, percent_complete=100.0))
    assert status_patch(old, new)["progress"] == {"step": 10, "percentComplete": 100.0, "eta": None}


def test_allowed_pod_annotations_join_the_fabric_annotations_which_win():
    job = {"kind": "Job", "spec": {"template": {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "ib0"}}}}}
    add_pod_annotations(job, {"example.com/profile": "on", "k8s.v1.cni.cncf.io/networks": "other/net"})
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "example.com/profile": "on",
        "k8s.v1.cni.cncf.io/networks": "ib0",
    }


def test_builtin_admission_without_node_access_says_so():
    from longctx_operator.reconciler import Reconciler

    verdict = Reconciler(kube=None, config=OperatorConfig(read_nodes=False))._admission(("n", "j"))
    assert not verdict.fits and verdict.reason == reasons.NODES_NOT_READABLE and "kueue or none" in verdict.message


def test_a_refused_create_is_described_from_the_api_error():
    from kubernetes.client.exceptions import ApiException

    from longctx_operator.reconciler import refusal

    quota = ApiException(status=403, reason="Forbidden")
    quota.body = "exceeded quota: count/jobs.batch"
    assert refusal(quota) == "creating the workload failed: 403 Forbidden: exceeded quota: count/jobs.batch"
    assert (
        refusal(ApiException(status=500, reason="Internal Server Error"))
        == "creating the workload failed: 500 Internal Server Error"
    )


def test_failing_reconciliations_back_off_exponentially_to_a_minute():
    from longctx_operator.reconciler import ERROR_RETRY_MAX_SECONDS, retry_delay

    assert [retry_delay(n) for n in range(1, 9)] == [1, 2, 4, 8, 16, 32, ERROR_RETRY_MAX_SECONDS, 60]


def test_a_reserved_gang_counts_each_node_once_while_its_pods_appear():
    """Gang A (2 nodes) was just admitted and one of its pods exists, unscheduled: A takes 2 of the
    4 free nodes (1 waiting pod + 1 pod not seen yet), so a 2-node gang B still fits."""
    from longctx_operator.api.spec import LongContextJobSpec
    from longctx_operator.reconciler import Reconciler

    def node(name):
        return {
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }

    reconciler = Reconciler(kube=None, config=OperatorConfig())
    cache = reconciler.cache
    for name in "abcd":
        cache.put_node(node(name), deleted=False)
    cache.put_job({"metadata": {"namespace": "n", "name": "a", "uid": "a-uid"}}, deleted=False)
    owner = {"kind": "LongContextJob", "name": "a", "uid": "a-uid", "controller": True}
    cache.put_workload(
        {"metadata": {"namespace": "n", "name": "a-g1", "uid": "a-g1-uid", "ownerReferences": [owner]}}, False
    )
    cache.put_pod(
        {
            "metadata": {
                "namespace": "n",
                "name": "a-g1-0",
                "ownerReferences": [{"kind": "Job", "name": "a-g1", "uid": "a-g1-uid", "controller": True}],
            },
            "spec": {"containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Pending"},
        },
        deleted=False,
    )
    reconciler.reservations.reserve(("n", "a"), nodes=2, generation=1)

    def verdict(nodes):
        spec = LongContextJobSpec.model_validate(
            {"model": {"preset": "tiny"}, "sequenceLength": 4096, "resources": {"nodes": nodes}}
        )
        reconciler.jobs.pop(("n", "b"), None)
        asyncio.run(reconciler._count_admission(("n", "b"), spec))
        return reconciler.jobs[("n", "b")].admission

    assert verdict(2).fits
    refused = verdict(3)
    assert not refused.fits and "2 available of 4 matching nodes" in refused.message


def test_a_failing_job_waits_for_its_backoff_unless_its_spec_changes():
    from longctx_operator.reconciler import Reconciler

    def job(generation, observed):
        return {
            "metadata": {"namespace": "n", "name": "j", "generation": generation},
            "status": {"observedGeneration": observed, "reason": reasons.WORKLOAD_CREATE_FAILED},
        }

    reconciler = Reconciler(kube=None, config=OperatorConfig())
    reconciler.job_event(job(1, 1), deleted=False)
    assert reconciler.queue._dirty == {("n", "j")}
    reconciler.queue._dirty.clear()
    reconciler.jobs[("n", "j")].failures = 3
    reconciler.job_event(job(1, 1), deleted=False)  # its own status patch
    assert reconciler.queue._dirty == set()
    reconciler.job_event(job(2, 1), deleted=False)  # the user changed the spec (e.g. suspend)
    assert reconciler.queue._dirty == {("n", "j")}


def test_freed_gpus_wake_only_jobs_waiting_for_builtin_admission():
    from longctx_operator.reconciler import Reconciler

    reconciler = Reconciler(kube=None, config=OperatorConfig())
    for name, status in (
        ("new", {}),
        ("no-room", {"phase": "Pending", "reason": reasons.INSUFFICIENT_GPUS}),
        ("in-kueue", {"phase": "Pending", "currentWorkload": "in-kueue-g1"}),
        ("running", {"phase": "Running", "currentWorkload": "running-g1"}),
    ):
        reconciler.cache.put_job({"metadata": {"namespace": "n", "name": name}, "status": status}, deleted=False)
    reconciler.wake_pending()
    assert reconciler.queue._dirty == {("n", "new"), ("n", "no-room")}


def test_a_node_heartbeat_wakes_no_one_a_cordon_does():
    """Most node events are status heartbeats (new condition times): they change nothing admission
    reads, so they must not requeue every waiting job (at 2,000 nodes they arrive tens per second)."""
    from longctx_operator.reconciler import Reconciler

    def node(beat: str, unschedulable: bool = False) -> dict:
        return {
            "metadata": {"name": "a", "labels": {}, "resourceVersion": beat},
            "spec": {"unschedulable": unschedulable},
            "status": {
                "allocatable": {"nvidia.com/gpu": "8"},
                "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": beat}],
            },
        }

    reconciler = Reconciler(kube=None, config=OperatorConfig())
    reconciler.cache.put_job({"metadata": {"namespace": "n", "name": "waiting"}, "status": {}}, deleted=False)
    reconciler.node_event(node("2026-11-26T10:00:00Z"), deleted=False)
    assert reconciler.queue._dirty == {("n", "waiting")}
    reconciler.queue._dirty.clear()
    cached = reconciler.cache.nodes["a"]
    reconciler.node_event(node("2026-11-26T10:00:20Z"), deleted=False)
    assert reconciler.queue._dirty == set() and reconciler.cache.nodes["a"] is cached
    reconciler.node_event(node("2026-11-26T10:00:40Z", unschedulable=True), deleted=False)
    assert reconciler.queue._dirty == {("n", "waiting")}


def test_a_fit_is_counted_again_only_when_gangs_reserved_too_many_nodes_meanwhile():
    """Gang b (1 node) is counted while gang a reserves nodes: with 2 of the 4 free nodes reserved,
    b's fit stands after one count; with all 4, b is counted again and refused."""
    from longctx_operator.admission import NodeMatches
    from longctx_operator.api.spec import LongContextJobSpec
    from longctx_operator.reconciler import Reconciler

    class Counted(NodeMatches):
        counts = 0

        def matching(self, request, nodes):
            Counted.counts += 1
            return super().matching(request, nodes)

    def node(name):
        return {
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }

    spec = LongContextJobSpec.model_validate(
        {"model": {"preset": "tiny"}, "sequenceLength": 4096, "resources": {"nodes": 1}}
    )

    async def count_while_a_reserves(nodes: int):
        reconciler = Reconciler(kube=None, config=OperatorConfig())
        reconciler.node_matches = Counted()
        Counted.counts = 0
        for name in "abcd":
            reconciler.cache.put_node(node(name), deleted=False)
        counting = asyncio.create_task(reconciler._count_admission(("n", "b"), spec))
        await asyncio.sleep(0)  # b's count has started
        reconciler.reservations.reserve(("n", "a"), nodes=nodes, generation=1)
        await counting
        return reconciler.jobs[("n", "b")].admission, Counted.counts

    verdict, counts = asyncio.run(count_while_a_reserves(2))
    assert verdict.fits and counts == 1
    verdict, counts = asyncio.run(count_while_a_reserves(4))
    assert not verdict.fits and counts == 2
