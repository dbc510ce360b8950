"""operator/handlers.py: the kopf registry the operator builds (what it watches, which namespaces,
its login) and the settings it runs kopf with."""

from longctx_operator.config import OperatorConfig


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
