"""The environment of a trainer container: JAX distributed identity, XLA flags, fabric and NVSHMEM.

Variable names come from the pod environment contract (longctx_trainer.podenv), which the
launcher and the trainer read.
"""

from __future__ import annotations

from longctx_trainer import podenv

from ..api.spec import LongContextJobSpec
from .. import names
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


def _var(name: str, value: str) -> dict:
    return {"name": name, "value": value}


def worker_env(job: str, spec: LongContextJobSpec, layout: ResolvedLayout, generation: int,
               fabric: FabricProfile) -> list[dict]:
    """Env of the trainer container, in a stable order.

    With one process per pod, JAX_PROCESS_ID is the pod's completion index. With several, the
    in-pod launcher (longctx_trainer.launch) starts LONGCTX_PROCESSES_PER_POD processes and gives
    process l of pod i JAX_PROCESS_ID = i * processesPerNode + l and JAX_LOCAL_DEVICE_IDS = its GPUs.
    The job's own `env` comes last; a name the fabric profile also sets (NCCL tuning, say) takes
    the job's value in place. Names of the contract are reserved (an API rule refuses them).
    """
    ppn = layout.processes_per_node
    env: list[dict] = [
        _var(podenv.COORDINATOR_ADDRESS, names.coordinator_address(job, generation, spec.network.coordinator_port)),
        _var(podenv.NUM_PROCESSES, str(spec.resources.nodes * ppn)),
    ]
    if ppn == 1:
        env.append({"name": podenv.PROCESS_ID, "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.labels['{names.COMPLETION_INDEX_LABEL}']"}}})
    env.append(_var(podenv.PROCESSES_PER_POD, str(ppn)))
    if ppn > 1:
        env.append(_var(podenv.DEVICES_PER_PROCESS, str(spec.resources.gpus_per_node // ppn)))
    env += [_var(podenv.GENERATION, str(generation)), _var(podenv.XLA_FLAGS, xla_flags(spec, layout))]
    if spec.resources.gpu_type == "cpu":
        env.append(_var(podenv.PLATFORMS, "cpu"))
    else:
        env.append(_var(podenv.GPU_MEMORY_FRACTION, GPU_MEMORY_FRACTION))
        env += [_var(k, v) for k, v in fabric.env.items()]
        if spec.communication.collective_permute == "nvshmem":
            env += [_var(k, v) for k, v in nvshmem_env(spec, fabric).items()]
    position = {var["name"]: i for i, var in enumerate(env)}
    for user in spec.env:
        if podenv.reserved(user.name):  # refused by the API; never rendered even if it slips in
            raise ValueError(f"spec.env: {user.name} is reserved for the operator")
        if user.name in position:
            env[position[user.name]] = _var(user.name, user.value)
        else:
            position[user.name] = len(env)
            env.append(_var(user.name, user.value))
    return env
