#!/usr/bin/env python3
"""Prints a kubectl-ready JSON List of simulated 8-GPU nodes (H100 HGX style) for KWOK to manage.

Topology: 8 nodes per rack (one NVLink clique per rack), 4 racks per block, blocks alternate
between two zones. Usage: nodes.py --count 4 [--start 0]
"""

import argparse
import json

NAME_PREFIX = "sim-gpu-"
NODES_PER_RACK = 8
RACKS_PER_BLOCK = 4
ZONES = ("sim-zone-a", "sim-zone-b")
GPUS_PER_NODE = 8
GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"
CLUSTER_UUID = "5c6a1f0e-8b2d-4c3e-9a47-2f1d0e6b7a90"  # GFD: <ClusterUUID>.<CliqueId>
RDMA_RESOURCE = "rdma/rdma_shared_device_a"

CAPACITY = {
    "cpu": "192",
    "memory": "2048Gi",
    "pods": "110",
    "ephemeral-storage": "3840Gi",
    "hugepages-1Gi": "0",
    "hugepages-2Mi": "64Gi",
    "nvidia.com/gpu": str(GPUS_PER_NODE),
    RDMA_RESOURCE: "63",  # the RDMA shared device plugin's usual rdmaHcaMax
}
# What a kubelet would leave for pods after system reservations.
ALLOCATABLE = CAPACITY | {"cpu": "190", "memory": "1980Gi"}


def node_name(index: int) -> str:
    return f"{NAME_PREFIX}{index:04d}"


def node_ip(index: int) -> str:
    return f"10.1.{index // 250}.{index % 250 + 1}"


def node(index: int) -> dict:
    rack = index // NODES_PER_RACK
    block = rack // RACKS_PER_BLOCK
    name = node_name(index)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": "sim-h100-8x",
                "topology.kubernetes.io/region": "sim-region",
                "topology.kubernetes.io/zone": ZONES[block % len(ZONES)],
                "topology.longctx.io/block": f"block-{block:03d}",
                "topology.longctx.io/rack": f"rack-{rack:04d}",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": GPU_PRODUCT,
                "nvidia.com/gpu.count": str(GPUS_PER_NODE),
                "nvidia.com/gpu.memory": "81559",
                "nvidia.com/gpu.family": "hopper",
                "nvidia.com/gpu.clique": f"{CLUSTER_UUID}.{rack}",
                "feature.node.kubernetes.io/rdma.available": "true",
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        # A Node is the one kind whose status the API server accepts on create.
        "status": {
            "capacity": CAPACITY,
            "allocatable": ALLOCATABLE,
            "addresses": [{"type": "InternalIP", "address": node_ip(index)}, {"type": "Hostname", "address": name}],
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=4)
    parser.add_argument("--start", type=int, default=0, help="index of the first node")
    args = parser.parse_args()
    items = [node(i) for i in range(args.start, args.start + args.count)]
    print(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


if __name__ == "__main__":
    main()
