"""operator/handlers.py: the kopf registry the operator builds (what it watches, which namespaces,
its login) and the settings it runs kopf with."""

import gc

from longctx_operator import handlers
from longctx_operator.config import OperatorConfig
from longctx_operator.reconciler import Reconciler


def test_nodes_are_watched_whenever_they_can_be_read():
    """Builtin admission counts their GPUs; under any admission the rings' placement reads their labels."""
    import kubernetes

    from longctx_operator.handlers import make_registry, watches
    from longctx_operator.kube import Kube

    kube = Kube(kubernetes.client.ApiClient())

    def watched(config):
        return [w.resource for w in watches(config, kube, Reconciler(kube, config), loop=None)]

    assert watched(OperatorConfig()) == ["jobs", "pods", "nodes"]
    assert watched(OperatorConfig(read_nodes=False)) == ["jobs", "pods"]
    assert watched(OperatorConfig(force_admission="kueue")) == ["jobs", "pods", "nodes"]
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


def test_the_objects_made_at_startup_are_out_of_the_collectors_reach():
    made_before = [{"startup": i} for i in range(1000)]
    frozen = gc.get_freeze_count()
    try:
        handlers.freeze_startup_objects()
        assert gc.get_freeze_count() >= frozen + len(made_before)
        assert not any(o is made_before for o in gc.get_objects(generation=2))
    finally:
        gc.unfreeze()
