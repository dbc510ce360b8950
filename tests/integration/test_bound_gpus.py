"""Builtin admission's count of the other pods (operator/occupancy.py, operator/bound_gpus.py) on the
real API server: the bound pods read from its protobuf pages give the same GPUs per node as its JSON
list counted the way admission counts a pod, and the waiting GPU pods come from the JSON list."""

from __future__ import annotations

import functools
import time

import kubernetes
import pytest

from longctx_operator import occupancy as occ
from longctx_operator.names import JOB_NAME_LABEL
from support import operator_harness as h

pytestmark = pytest.mark.integration
POOL = "bound-gpus-tests"
TOLERATE_ALL = [{"operator": "Exists"}]


def gpu_pod(name: str, containers: list[dict], node: str | None = None, labels: dict | None = None) -> dict:
    spec: dict = {
        "containers": [
            {"name": f"c{i}", "image": "busybox", "resources": resources} for i, resources in enumerate(containers)
        ],
        "tolerations": TOLERATE_ALL,
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {"no-such-node": "x"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


def limits(gpus: str) -> dict:
    return {"limits": {"nvidia.com/gpu": gpus}}


def test_bound_pods_counted_from_protobuf_pages_match_the_json_list(cluster, admin_kubectl, kubectl, namespace):
    a, b = h.add_pool_nodes(admin_kubectl, POOL, count=2)
    kubectl.apply(
        gpu_pod("eight", [limits("8")], a),
        gpu_pod("two-containers", [limits("2"), {"requests": {"cpu": "10m"}}, limits("1")], b),
        gpu_pod("kilo", [limits("1k")], b),  # a whole number the API server serves as "1k"
        gpu_pod("cpu-only", [{"requests": {"cpu": "10m"}}], a),
        gpu_pod("waiting", [limits("4")]),
        gpu_pod("waiting-cpu", [{}]),
        gpu_pod("ours", [limits("8")], a, labels={JOB_NAME_LABEL: "someone"}),  # the operator's watch counts it
    )
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(str(cluster.kubeconfig)))
    lister = functools.partial(core.list_namespaced_pod, namespace)
    listed = kubectl.json("get", "pods", "-l", f"!{JOB_NAME_LABEL}", "--field-selector", occ.NOT_FINISHED)["items"]
    kilo = next(pod for pod in listed if pod["metadata"]["name"] == "kilo")
    assert kilo["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "1k"  # not "1000"
    reference = occ.occupancy(listed)  # the JSON list, counted pod by pod as admission does
    assert reference.used == {a: 8, b: 1003}

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(occ, "BOUND_PAGE", 2)  # three bound pods: two pages and a continue token
        found = occ.OtherPods([lister], time.monotonic).current()
    assert found.used == reference.used
    assert [pod["metadata"]["name"] for pod in found.waiting] == ["waiting"]
    assert found.waiting[0]["spec"]["nodeSelector"] == {"no-such-node": "x"}  # what admission matches
