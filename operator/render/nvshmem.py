"""NVSHMEM settings, derived from the fabric's NCCL settings so the two never disagree.

XLA uses NVSHMEM for collective-permutes (the ring's K/V rotation) when
--xla_gpu_experimental_enable_nvshmem is set; NVSHMEM needs exactly one GPU per process.
"""

from __future__ import annotations

from longctx_trainer.contract.hardware import FABRICS

from ..api.spec import LongContextJobSpec
from .fabrics import FabricProfile

XLA_FLAG = "--xla_gpu_experimental_enable_nvshmem=true"
# NVSHMEM_REMOTE_TRANSPORT over each kind of RDMA; without RDMA NVSHMEM cannot leave a node.
REMOTE_TRANSPORTS = {"verbs": "ibrc", "libfabric": "libfabric"}


def nvshmem_env(spec: LongContextJobSpec, fabric: FabricProfile) -> dict[str, str]:
    nccl = fabric.env
    rdma = FABRICS[spec.network.fabric].rdma
    multi_node = spec.resources.nodes > 1
    env = {
        "NVSHMEM_REMOTE_TRANSPORT": REMOTE_TRANSPORTS[rdma] if multi_node and rdma else "none",
        "NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME": nccl.get("NCCL_SOCKET_IFNAME", spec.network.socket_interface).split(",")[
            0
        ],
        "NVSHMEM_SYMMETRIC_SIZE": spec.communication.nvshmem_symmetric_size,
    }
    if "NCCL_IB_HCA" in nccl:
        env["NVSHMEM_HCA_LIST"] = nccl["NCCL_IB_HCA"]
        env["NVSHMEM_ENABLE_NIC_PE_MAPPING"] = "1"
    if "NCCL_IB_GID_INDEX" in nccl:
        env["NVSHMEM_IB_GID_INDEX"] = nccl["NCCL_IB_GID_INDEX"]
    if env["NVSHMEM_REMOTE_TRANSPORT"] == "libfabric":
        env["NVSHMEM_LIBFABRIC_PROVIDER"] = nccl.get("FI_PROVIDER", "efa")
    return env
