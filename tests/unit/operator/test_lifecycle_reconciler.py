"""The reconciler's own pieces: work-queue semantics, status patches, pod annotations."""

import asyncio

from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus, ProgressStatus
from longctx_operator.cache import Cache
from longctx_operator.config import OperatorConfig
from longctx_operator.reconciler import add_pod_annotations, status_patch
from longctx_operator.workqueue import WorkQueue


def test_work_queue_deduplicates_and_never_runs_a_key_twice_at_once():
    async def scenario():
        q = WorkQueue()
        q.add("a"), q.add("a"), q.add("b")
        first = await q.get()
        q.add("a")  # re-added while processing: queued again only when done
        second = await q.get()
        assert (first, second) == ("a", "b")
        assert q._queue.empty()
        q.done("a")
        assert await asyncio.wait_for(q.get(), 1) == "a"
        q.add_after("c", 0.05)
        q.add_after("c", 10)  # a later deadline does not replace an earlier one
        assert await asyncio.wait_for(q.get(), 1) == "c"
        q.done("c")
        q.add_after("c", 0.01)  # a fired timer does not block the next one
        assert await asyncio.wait_for(q.get(), 1) == "c"

    asyncio.run(scenario())


def test_status_patch_removes_cleared_fields_and_leaves_progress_alone():
    old = {"phase": "Running", "currentWorkload": "j-g1", "restarts": 0, "progress": {"step": 3}}
    new = LongContextJobStatus(phase="Restarting", restarts=1, progress=ProgressStatus(step=1))
    patch = status_patch(old, new)
    assert patch["phase"] == "Restarting" and patch["restarts"] == 1
    assert patch["currentWorkload"] is None
    assert "progress" not in patch


def test_allowed_pod_annotations_join_the_fabric_annotations_which_win():
    job = {"kind": "Job", "spec": {"template": {"metadata": {"annotations": {"k8s.v1.cni.cncf.io/networks": "ib0"}}}}}
    add_pod_annotations(job, {"example.com/profile": "on", "k8s.v1.cni.cncf.io/networks": "other/net"})
    assert job["spec"]["template"]["metadata"]["annotations"] == {
        "example.com/profile": "on",
        "k8s.v1.cni.cncf.io/networks": "ib0",
    }


def test_cache_keeps_the_newest_copy_of_a_job():
    cache = Cache()
    newer = {"metadata": {"namespace": "n", "name": "j", "resourceVersion": "20"}, "status": {"phase": "Running"}}
    older = {"metadata": {"namespace": "n", "name": "j", "resourceVersion": "19"}, "status": {"phase": "Admitted"}}
    cache.put_job(newer, deleted=False)
    cache.put_job(older, deleted=False)
    assert cache.jobs_of[("n", "j")]["status"]["phase"] == "Running"
    cache.put_job(older, deleted=True)
    assert ("n", "j") not in cache.jobs_of


def test_cache_files_kueues_workload_under_its_job_and_keeps_a_newer_one():
    cache = Cache()
    job = {"metadata": {"namespace": "n", "name": "j-g1", "labels": {"longctx.io/job-name": "j"}}}
    cache.put_workload(job, deleted=False)

    def kueue(name, reason):
        owner = {"apiVersion": "batch/v1", "kind": "Job", "name": "j-g1", "uid": "u"}
        conditions = [{"type": "QuotaReserved", "status": "False", "reason": reason}]
        return {
            "metadata": {"namespace": "n", "name": name, "ownerReferences": [owner]},
            "status": {"conditions": conditions},
        }

    assert cache.put_kueue_workload(kueue("job-j-g1-old", "Pending"), deleted=False) == ("n", "j")
    assert cache.put_kueue_workload(kueue("job-j-g1-new", "Inadmissible"), deleted=False) == ("n", "j")
    cache.put_kueue_workload(kueue("job-j-g1-old", "Pending"), deleted=True)  # a late delete of the old one
    assert cache.kueue_workloads[("n", "j-g1")]["status"]["conditions"][0]["reason"] == "Inadmissible"
    cache.put_kueue_workload(kueue("job-j-g1-new", "Inadmissible"), deleted=True)
    assert ("n", "j-g1") not in cache.kueue_workloads
    unowned = {"metadata": {"namespace": "n", "name": "w", "ownerReferences": []}, "status": {}}
    assert cache.put_kueue_workload(unowned, deleted=False) is None and len(cache.kueue_workloads) == 0


def test_cache_finds_the_pods_of_one_generation():
    cache = Cache()
    for gen, name in ((1, "a"), (2, "b")):
        owner = cache.put_pod(
            {
                "metadata": {
                    "namespace": "n",
                    "name": name,
                    "labels": {"longctx.io/job-name": "j", "longctx.io/generation": str(gen)},
                },
                "spec": {},
                "status": {},
            },
            deleted=False,
        )
        assert owner == ("n", "j")
    assert [p["metadata"]["name"] for p in cache.generation_pods(("n", "j"), 2)] == ["b"]


def test_nodes_are_watched_only_when_the_configuration_can_read_them():
    from longctx_operator.handlers import make_registry

    def watched(config):
        return {h.selector.any_name for h in make_registry(config)._watching.get_all_handlers()}

    assert "nodes" in watched(OperatorConfig())
    without = watched(OperatorConfig(read_nodes=False))
    assert "nodes" not in without and {"pods", "jobs"} <= without


def test_jobs_in_excluded_namespaces_are_never_served():
    from longctx_operator.handlers import make_registry

    [handler] = [
        h
        for h in make_registry(
            OperatorConfig(excluded_namespaces=["kube-system", "infra"])
        )._watching.get_all_handlers()
        if h.selector.any_name == "longcontextjobs"
    ]
    assert not handler.when(namespace="kube-system") and not handler.when(namespace="infra")
    assert handler.when(namespace="ml-a")


def test_the_explicit_registry_logs_in_with_the_kubernetes_client():
    """An explicit registry gets none of kopf's default login handlers: without its own, the
    operator would start and then fail every API call with 'Ran out of valid credentials'."""
    from longctx_operator.handlers import make_registry

    activities = {h.activity.value for h in make_registry(OperatorConfig())._activities.get_all_handlers()}
    assert "authentication" in activities


def test_builtin_admission_without_node_access_says_so():
    from longctx_operator.api.spec import LongContextJob
    from longctx_operator.reconciler import Reconciler

    job = LongContextJob.model_validate(
        {
            "apiVersion": "longctx.io/v1alpha1",
            "kind": "LongContextJob",
            "metadata": {"name": "j", "namespace": "n"},
            "spec": {"model": {"preset": "tiny"}, "sequenceLength": 4096, "resources": {"nodes": 1}},
        }
    )
    verdict = Reconciler(kube=None, config=OperatorConfig(read_nodes=False))._admission(("n", "j"), job)
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
    from longctx_operator.api.spec import LongContextJob
    from longctx_operator.reconciler import Reconciler

    def node(name):
        return {
            "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
            "spec": {},
            "status": {"allocatable": {"nvidia.com/gpu": "8"}, "conditions": [{"type": "Ready", "status": "True"}]},
        }

    reconciler = Reconciler(kube=None, config=OperatorConfig())
    for name in "abcd":
        reconciler.cache.put_node(node(name), deleted=False)
    reconciler.cache.put_pod(
        {
            "metadata": {
                "namespace": "n",
                "name": "a-g1-0",
                "labels": {"longctx.io/job-name": "a", "longctx.io/generation": "1"},
            },
            "spec": {"containers": [{"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]},
            "status": {"phase": "Pending"},
        },
        deleted=False,
    )
    reconciler.reservations.reserve(("n", "a"), nodes=2, generation=1)

    def job(name, nodes):
        return LongContextJob.model_validate(
            {
                "apiVersion": "longctx.io/v1alpha1",
                "kind": "LongContextJob",
                "metadata": {"name": name, "namespace": "n"},
                "spec": {"model": {"preset": "tiny"}, "sequenceLength": 4096, "resources": {"nodes": nodes}},
            }
        )

    assert reconciler._admission(("n", "b"), job("b", 2)).fits
    verdict = reconciler._admission(("n", "b"), job("b", 3))
    assert not verdict.fits and "2 available of 4 matching nodes" in verdict.message


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


def test_kopf_builds_no_diff_base_and_no_handler_needs_one():
    """kopf's per-event essence is for change and daemon handlers: the operator has none, so it
    skips building it (a deep copy of every pod and node on every event)."""
    import kopf

    from longctx_operator.handlers import configure, make_registry

    registry = make_registry(OperatorConfig())
    assert not registry._changing.get_all_handlers() and not registry._spawning.get_all_handlers()
    settings = kopf.OperatorSettings()
    configure(settings)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}}, "spec": {"x": 1}}
    assert kopf.AnnotationsDiffBaseStorage().build(body=kopf.Body(pod)) is not None  # what kopf would do
    assert settings.persistence.diffbase_storage.build(body=kopf.Body(pod)) is None
    assert settings.persistence.diffbase_storage.fetch(body=kopf.Body(pod)) is None
