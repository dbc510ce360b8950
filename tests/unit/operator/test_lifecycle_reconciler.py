"""The reconciler's own pieces: work-queue semantics, status patches, pod annotations."""

import asyncio

from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus, ProgressStatus
from longctx_operator.config import OperatorConfig
from longctx_operator.reconciler import Reconciler, add_pod_annotations, status_patch
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


def test_nodes_are_watched_only_when_builtin_admission_may_run_and_they_can_be_read():
    import kubernetes

    from longctx_operator.handlers import make_registry, watches
    from longctx_operator.kube import Kube

    kube = Kube(kubernetes.client.ApiClient())

    def watched(config):
        return [w.resource for w in watches(config, kube, Reconciler(kube, config), loop=None)]

    assert watched(OperatorConfig()) == ["jobs", "pods", "nodes"]
    assert watched(OperatorConfig(read_nodes=False)) == ["jobs", "pods"]
    assert watched(OperatorConfig(admission_modes=["kueue", "none"])) == ["jobs", "pods"]
    assert watched(OperatorConfig(force_admission="kueue")) == ["jobs", "pods"]
    assert watched(OperatorConfig(watch_namespaces=["a", "b"])) == ["jobs", "jobs", "pods", "pods", "nodes"]
    kopf_kinds = {h.selector.any_name for h in make_registry(OperatorConfig())._watching.get_all_handlers()}
    assert kopf_kinds == {"longcontextjobs"}  # pods, Jobs and nodes only through label-selected watches


def test_jobs_and_pods_are_watched_by_the_job_name_label_on_the_api_server():
    import kubernetes

    from longctx_operator.handlers import watches
    from longctx_operator.kube import Kube
    from longctx_operator.names import JOB_NAME_LABEL

    kube = Kube(kubernetes.client.ApiClient())
    found = watches(OperatorConfig(), kube, Reconciler(kube, OperatorConfig()), loop=None)
    assert {w.resource: w.selector for w in found} == {
        "jobs": {"label_selector": JOB_NAME_LABEL},
        "pods": {"label_selector": JOB_NAME_LABEL},
        "nodes": {},
    }


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
