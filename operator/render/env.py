"""The environment of a trainer container: JAX distributed identity, XLA flags, fabric and NVSHMEM."""

from __future__ import annotations

from ..api.spec import LongContextJobSpec
from . import names
from .fabrics import FabricProfile
from .layout import ResolvedLayout
from .nvshmem import XLA_FLAG as NVSHMEM_XLA_FLAG
from .nvshmem import nvshmem_env

GPU_XLA_FLAGS = ("--xla_gpu_enable_latency_hiding_scheduler=true",)
GPU_MEMORY_FRACTION = "0.92"


def xla_flags(spec: LongContextJobSpec, layout: ResolvedLayout) -> str:
    if spec.resources.gpu_type == "cpu":
        devices = spec.resources.gpus_per_node // layout.processes_per_node
        return f"--xla_force_host_platform_device_count={devices}"
    flags = list(GPU_XLA_FLAGS)
    if spec.communication.collective_permute == "nvshmem":
        flags.append(NVSHMEM_XLA_FLAG)
    return " ".join(flags)


def worker_env(job: str, spec: LongContextJobSpec, layout: ResolvedLayout, generation: int,
               fabric: FabricProfile) -> list[dict]:
    """Env of the trainer container, in a stable order.

    With one process per pod, JAX_PROCESS_ID is the pod's completion index. With several, the
    in-pod launcher (longctx_trainer.launch) starts LONGCTX_PROCESSES_PER_POD processes and gives
    process l of pod i JAX_PROCESS_ID = i * processesPerNode + l and JAX_LOCAL_DEVICE_IDS = its GPUs.
    """
    ppn = layout.processes_per_node
    env: list[dict] = [
        {"name": "JAX_COORDINATOR_ADDRESS",
         "value": names.coordinator_address(job, generation, spec.network.coordinator_port)},
        {"name": "JAX_NUM_PROCESSES", "value": str(spec.resources.nodes * ppn)},
    ]
    if ppn == 1:
        env.append({"name": "JAX_PROCESS_ID", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{names.COMPLETION_INDEX_LABEL}']"}}})
    env.append({"name": "LONGCTX_PROCESSES_PER_POD", "value": str(ppn)})
    if ppn > 1:
        env.append({"name": "LONGCTX_DEVICES_PER_PROCESS",
                    "value": str(spec.resources.gpus_per_node // ppn)})
    env += [
        {"name": "LONGCTX_GENERATION", "value": str(generation)},
        {"name": "XLA_FLAGS", "value": xla_flags(spec, layout)},
    ]
    if spec.resources.gpu_type == "cpu":
        env.append({"name": "JAX_PLATFORMS", "value": "cpu"})
    else:
        env.append({"name": "XLA_PYTHON_CLIENT_MEM_FRACTION", "value": GPU_MEMORY_FRACTION})
        env += [{"name": k, "value": v} for k, v in fabric.env.items()]
        if spec.communication.collective_permute == "nvshmem":
            env += [{"name": k, "value": v} for k, v in nvshmem_env(spec, fabric).items()]
    env += [{"name": e.name, "value": e.value} for e in spec.env]
    return env
