"""The operator configuration (operator/config.py): the chart's operator.yaml, typed and strict."""

import pytest
from pydantic import ValidationError

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
