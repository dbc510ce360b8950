"""The simulated GPU nodes advertise what a real H100 node with GPU Feature Discovery would."""

import pytest

pytestmark = pytest.mark.integration

GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"


def test_nodes_are_ready_gpu_nodes(admin_kubectl):
    nodes = admin_kubectl.json("get", "nodes", "-l", "type=kwok")["items"]
    assert len(nodes) >= 4
    for node in nodes:
        name = node["metadata"]["name"]
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", name
        for resources in (node["status"]["capacity"], node["status"]["allocatable"]):
            assert resources["nvidia.com/gpu"] == "8", name
            assert resources["rdma/rdma_shared_device_a"] == "63", name
            assert resources["hugepages-2Mi"] == "64Gi", name
            assert {"cpu", "memory", "pods", "ephemeral-storage"} <= resources.keys(), name
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == GPU_PRODUCT
        assert labels["nvidia.com/gpu.count"] == "8"
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.clique"].endswith(
            "." + str(int(labels["topology.longctx.io/rack"].split("-")[1]))
        )
        assert labels["topology.kubernetes.io/zone"].startswith("sim-zone-")
        assert labels["topology.longctx.io/block"].startswith("block-")
        taints = node["spec"].get("taints", [])
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in taints
        assert not [t for t in taints if t["key"].startswith("node.kubernetes.io/")], taints


def test_racks_share_one_nvlink_clique(admin_kubectl):
    nodes = admin_kubectl.json("get", "nodes", "-l", "type=kwok")["items"]
    cliques_by_rack: dict[str, set[str]] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        cliques_by_rack.setdefault(labels["topology.longctx.io/rack"], set()).add(labels["nvidia.com/gpu.clique"])
    assert all(len(cliques) == 1 for cliques in cliques_by_rack.values()), cliques_by_rack
