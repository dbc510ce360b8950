"""The operator configuration (operator/config.py): the chart's operator.yaml, typed and strict."""

import pytest
from pydantic import ValidationError

from longctx_operator.api.spec import NetworkSpec
from longctx_operator.config import OperatorConfig


def test_defaults_without_a_file():
    config = OperatorConfig.load(None)
    assert config.trainer_image.startswith("ghcr.io/longctx/longctx-trainer")
    assert config.watch_namespaces == [] and config.read_nodes and config.allowed_pod_annotations == []


def test_file_values_and_unknown_keys(tmp_path):
    path = tmp_path / "operator.yaml"
    path.write_text(
        "trainerImage: registry.example/trainer:1.2\ntrainerImagePullPolicy: Always\n"
        "watchNamespaces: [a]\nreadNodes: false\n"
    )
    config = OperatorConfig.load(path)
    assert (config.trainer_image, config.trainer_image_pull_policy) == ("registry.example/trainer:1.2", "Always")
    assert config.watch_namespaces == ["a"] and config.read_nodes is False
    path.write_text("canReadNodes: false\n")  # a key the code does not know is a chart/code mismatch
    with pytest.raises(ValidationError, match="canReadNodes"):
        OperatorConfig.load(path)


def test_pod_annotation_and_metrics_url_allow_lists():
    config = OperatorConfig(
        allowed_pod_annotations=["example.com/*", "profiler.io/on"], metrics_url_prefixes=["http://127.0.0.1:"]
    )
    assert config.pod_annotation_allowed("example.com/x") and config.pod_annotation_allowed("profiler.io/on")
    assert not config.pod_annotation_allowed("k8s.v1.cni.cncf.io/networks")
    assert config.metrics_url_allowed("http://127.0.0.1:9400/metrics")
    assert not config.metrics_url_allowed("http://10.0.0.1:9400/metrics")
    assert not OperatorConfig(metrics_url_prefixes=["file:"]).metrics_url_allowed("file:///etc/passwd")


@pytest.mark.parametrize(
    "url, allowed",
    [
        ("http://metrics.example.com/metrics", True),
        ("http://METRICS.example.com/metrics", True),
        ("http://metrics.example.com.attacker.net/metrics", False),
        ("http://metrics.example.com:9400/metrics", False),  # a prefix without a port: the default one
        ("http://metrics.example.com@attacker.net/metrics", False),
        ("http://attacker.net\\@metrics.example.com/", False),
        ("https://metrics.example.com/metrics", False),
        ("http://127.0.0.1:9400/metrics", True),  # "host:" admits any port
        ("http://127.0.0.1.attacker.net:9400/metrics", False),
        ("http://127.0.0.1:99999/metrics", False),
        ("https://prom.example.com:8443/scrape/job-a", True),
        ("https://prom.example.com:8443/scrape", True),
        ("https://prom.example.com:8443/scraper/job-a", False),  # the path on a segment boundary
        ("https://prom.example.com:8443/scrape/../admin", False),
        ("https://prom.example.com:8443/scrape/%2e%2e/admin", False),
        ("https://prom.example.com:8444/scrape/job-a", False),
        ("http://127.0.0.1:9400/metrics\nX: y", False),
        ("file:///var/run/secrets/kubernetes.io/serviceaccount/token", False),
        ("http://metrics.example.com/metrics/\U0001f600", False),  # beyond U+FFFF: not plain ASCII
    ],
)
def test_metrics_urls_are_compared_by_scheme_host_port_and_path(url, allowed):
    config = OperatorConfig(
        metrics_url_prefixes=[
            "http://metrics.example.com",
            "http://127.0.0.1:",
            "https://prom.example.com:8443/scrape/",
        ]
    )
    assert config.metrics_url_allowed(url) is allowed


def test_priority_class_and_toleration_allow_lists_are_empty_by_default():
    config = OperatorConfig()
    assert not config.priority_class_allowed("system-node-critical") and not config.toleration_allowed("a")
    config = OperatorConfig(allowed_priority_classes=["training-*"], allowed_tolerations=["example.com/*"])
    assert config.priority_class_allowed("training-high") and not config.priority_class_allowed("system-node-critical")
    assert config.toleration_allowed("example.com/pool")
    assert not config.toleration_allowed("node-role.kubernetes.io/control-plane")


def network(fabric: str, networks=()) -> NetworkSpec:
    return NetworkSpec.model_validate({"fabric": fabric, "networks": list(networks)})


def test_fabrics_and_networks_are_the_administrators_per_namespace():
    """Job authors pick only fabrics and secondary networks the operator's networkAllowList gives
    their namespace: by default every fabric but gcp-tcpx (a privileged sidecar) and no network."""
    default = OperatorConfig().network_allow_list
    assert default.refusal("team", network("infiniband")) is None
    refused = default.refusal("team", network("gcp-tcpx", [f"vpc{i}" for i in range(4)]))
    assert refused.startswith("spec.network.fabric: gcp-tcpx is not allowed in namespace team")
    assert "networkAllowList" in refused and "gcp-tcpxo" in refused
    refused = default.refusal("team", network("gcp-tcpxo", [f"vpc{i}" for i in range(8)]))
    assert refused == (
        'spec.network.networks[0]: "vpc0" is not allowed in namespace team by the operator\'s networkAllowList '
        "(allowed: none)"
    )
    allow = OperatorConfig.model_validate(
        {"networkAllowList": {"namespaces": {"ml": {"fabrics": ["gcp-tcpx", "tcp"], "networks": ["vpc[0-3]", "ib-*"]}}}}
    ).network_allow_list
    assert allow.refusal("ml", network("gcp-tcpx", [f"vpc{i}" for i in range(4)])) is None
    assert allow.refusal("ml", network("infiniband", ["ib-0"])).startswith("spec.network.fabric: infiniband")
    assert allow.refusal("ml", network("tcp", ["ib-0", "other-net"])).startswith(
        'spec.network.networks[1]: "other-net"'
    )
    # Other namespaces keep the default: the override is the listed namespace's alone.
    assert allow.refusal("team", network("gcp-tcpx", [f"vpc{i}" for i in range(4)])) is not None
    with pytest.raises(ValidationError, match="fabrics"):
        OperatorConfig.model_validate({"networkAllowList": {"default": {"fabrics": ["carrier-pigeon"]}}})


def test_system_namespaces_are_excluded_and_cannot_be_watched():
    assert OperatorConfig().excluded_namespaces == ["kube-system", "kube-public", "kube-node-lease"]
    with pytest.raises(ValidationError, match="watchNamespaces: kube-system also in excludedNamespaces"):
        OperatorConfig(watch_namespaces=["ml", "kube-system"])
    assert OperatorConfig(watch_namespaces=["kube-system"], excluded_namespaces=[]).watch_namespaces == ["kube-system"]
