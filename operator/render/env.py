"""The environment of a trainer container: JAX distributed identity, XLA flags, fabric and NVSHMEM.

Variable names come from the pod environment contract (longctx_trainer.contract.podenv), which the
launcher and the trainer read.
"""

from __future__ import annotations

from longctx_trainer.contract import podenv, topology

from .. import names
from ..api.spec import LongContextJobSpec
from ..config import OperatorConfig
from ..layout import ResolvedLayout
from ..placement import index_ordered, placement_wanted, topology_levels
from .fabrics import FabricProfile
from .nvshmem import XLA_FLAG as NVSHMEM_XLA_FLAG
from .nvshmem import nvshmem_env

GPU_XLA_FLAGS = ("--xla_gpu_enable_latency_hiding_scheduler=true",)
CPU_XLA_FLAGS = ("--xla_backend_optimization_level=1",)
"""A CPU job (the quickstart, `longctx run`) trains a small model for few steps, where compiling is
most of its CPU time: LLVM's O1 compiles far faster than XLA's default O2 at about the same step
time (measured: docs/operator.md, the pod env's XLA_FLAGS)."""
GPU_MEMORY_FRACTION = "0.92"


def cpu_xla_flags(devices: int) -> str:
    """XLA_FLAGS of a CPU job's process: `devices` host devices, compiled as CPU_XLA_FLAGS says."""
    return " ".join((f"--xla_force_host_platform_device_count={devices}", *CPU_XLA_FLAGS))


def xla_flags(spec: LongContextJobSpec, layout: ResolvedLayout) -> str:
    if spec.on_cpu:
        return cpu_xla_flags(spec.resources.gpus_per_node // layout.processes_per_node)
    flags = list(GPU_XLA_FLAGS)
    if spec.communication.collective_permute == "nvshmem":
        flags.append(NVSHMEM_XLA_FLAG)
    return " ".join(flags)


def _var(name: str, value: str) -> dict:
    return {"name": name, "value": value}


def _rank_from_completion_index(name: str) -> dict:
    return {
        "name": name,
        "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{names.COMPLETION_INDEX_LABEL}']"}},
    }


def topology_env(spec: LongContextJobSpec, config: OperatorConfig) -> list[dict]:
    """Where the pod runs, for the trainer's ring order (contract/topology.py): the node's name and
    each level's label, read from the pod through the downward API once it is bound, and where the
    operator writes them (placement.py) the files of the gang's placement table and of the pod's
    placement annotation; under Kueue's topology-aware scheduling the ranks keep the
    completion-index order Kueue placed them in."""
    levels = topology_levels(spec, config)
    env = [
        {"name": podenv.NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        _var(podenv.TOPOLOGY_LEVELS, ",".join(levels)),
        _var(podenv.RANK_ORDER, topology.ORDER_INDEX if index_ordered(spec) else topology.ORDER_TOPOLOGY),
    ]
    for i, key in enumerate(levels):
        env.append(
            {"name": podenv.topology_level(i), "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{key}']"}}}
        )
    if placement_wanted(spec, config):
        env.append(_var(podenv.PLACEMENT_TABLE, f"{names.CONFIG_MOUNT}/{names.PLACEMENT_TABLE_FILE}"))
        env.append(_var(podenv.PLACEMENT_FILE, f"{names.CONFIG_MOUNT}/{names.PLACEMENT_FILE}"))
    return env


def layout_env(spec: LongContextJobSpec, layout: ResolvedLayout) -> list[dict]:
    """The planned layout for any trainer: the bundled one reads the same from its config file."""
    return [
        _var(podenv.DATA_PARALLEL, str(layout.data)),
        _var(podenv.CONTEXT_PARALLEL, str(layout.context)),
        _var(podenv.TENSOR_PARALLEL, str(layout.tensor)),
        _var(podenv.SEQUENCE_LENGTH, str(spec.sequence_length)),
        _var(podenv.OFFLOAD_CHUNK_TOKENS, str(layout.chunk_tokens or 0) if layout.offload else "0"),
        _var(podenv.CONFIG, f"{names.CONFIG_MOUNT}/{names.CONFIG_FILE}"),
    ]


def torch_processes_per_pod(spec: LongContextJobSpec, layout: ResolvedLayout) -> int:
    """PyTorch runs one process per GPU; CPU jobs keep the planned processes per node."""
    return spec.resources.gpus_per_node if not spec.on_cpu else layout.processes_per_node


def torch_env(rank0: str, spec: LongContextJobSpec, layout: ResolvedLayout) -> list[dict]:
    """What torch.distributed.init_process_group(init_method="env://") and torchrun read. Rank 0's
    name under the headless Service (`rank0`, names.rank0_host) is the rendezvous; with one process per pod RANK is the
    pod's completion index (no torchrun needed), with several torchrun sets RANK and LOCAL_RANK."""
    per_pod = torch_processes_per_pod(spec, layout)
    values = {
        podenv.MASTER_ADDR: rank0,
        podenv.MASTER_PORT: str(spec.network.coordinator_port),
        podenv.WORLD_SIZE: str(spec.resources.nodes * per_pod),
        podenv.NNODES: str(spec.resources.nodes),
        podenv.LOCAL_WORLD_SIZE: str(per_pod),
    }
    env = [_var(name, value) for name, value in values.items()]
    env.append(_rank_from_completion_index(podenv.NODE_RANK))
    if per_pod == 1:
        env += [_rank_from_completion_index(podenv.RANK), _var(podenv.LOCAL_RANK, "0")]
    for torchrun_name, torch_name in podenv.TORCHRUN.items():
        env.append(
            _rank_from_completion_index(torchrun_name)
            if torch_name == podenv.NODE_RANK
            else _var(torchrun_name, values[torch_name])
        )
    return env


def worker_env(
    rank0: str,
    spec: LongContextJobSpec,
    layout: ResolvedLayout,
    generation: int,
    fabric: FabricProfile,
    config: OperatorConfig,
) -> list[dict]:
    """Env of the trainer container, in a stable order; `rank0` is rank 0's DNS name (names.rank0_host).

    With one process per pod, JAX_PROCESS_ID is the pod's completion index. With several, the
    in-pod launcher (longctx_trainer.launch) starts LONGCTX_PROCESSES_PER_POD processes and gives
    process l of pod i JAX_PROCESS_ID = i * processesPerNode + l and JAX_LOCAL_DEVICE_IDS = its GPUs.
    The job's own `env` comes last; a name the fabric profile also sets (NCCL tuning, say) takes
    the job's value in place. Names of the contract are reserved (an API rule refuses them).
    """
    if spec.trainer is not None and spec.trainer.framework == "pytorch":
        env = torch_env(rank0, spec, layout) + [_var(podenv.GENERATION, str(generation))]
        if not spec.on_cpu:
            env += [_var(k, v) for k, v in fabric.env.items()]
    else:
        env = jax_env(rank0, spec, layout, generation, fabric, config)
    env += layout_env(spec, layout)
    position = {var["name"]: i for i, var in enumerate(env)}  # the job's own env: below
    for user in spec.env:
        if podenv.reserved(user.name):  # refused by the API; never rendered even if it slips in
            raise ValueError(f"spec.env: {user.name} is reserved for the operator")
        if user.name in position:
            env[position[user.name]] = _var(user.name, user.value)
        else:
            position[user.name] = len(env)
            env.append(_var(user.name, user.value))
    return env


def in_place_env(rank0: str, spec: LongContextJobSpec) -> list[dict]:
    """Where in-place restart is on: rank 0's launcher's restart coordinator (rank 0's name, as the
    JAX coordinator's, and network.restartPort) and the budget (trainer/inplace.py)."""
    if not spec.restart_policy.in_place:
        return []
    return [
        _var(podenv.RESTART_ADDRESS, names.coordinator_address(rank0, spec.network.restart_port)),
        _var(podenv.IN_PLACE_RESTARTS, str(spec.restart_policy.max_in_place_restarts)),
    ]


def jax_env(
    rank0: str,
    spec: LongContextJobSpec,
    layout: ResolvedLayout,
    generation: int,
    fabric: FabricProfile,
    config: OperatorConfig,
) -> list[dict]:
    """JAX distributed identity, XLA flags, the fabric's and NVSHMEM's settings."""
    ppn = layout.processes_per_node
    env: list[dict] = [
        _var(podenv.COORDINATOR_ADDRESS, names.coordinator_address(rank0, spec.network.coordinator_port)),
        _var(podenv.NUM_PROCESSES, str(spec.resources.nodes * ppn)),
    ]
    if ppn == 1:
        env.append(_rank_from_completion_index(podenv.PROCESS_ID))
    env.append(_var(podenv.PROCESSES_PER_POD, str(ppn)))
    if ppn > 1:
        env.append(_var(podenv.DEVICES_PER_PROCESS, str(spec.resources.gpus_per_node // ppn)))
    env += [_var(podenv.GENERATION, str(generation)), _var(podenv.XLA_FLAGS, xla_flags(spec, layout))]
    env += in_place_env(rank0, spec)
    env += topology_env(spec, config)
    if spec.on_cpu:
        env.append(_var(podenv.PLATFORMS, "cpu"))
    else:
        env.append(_var(podenv.GPU_MEMORY_FRACTION, GPU_MEMORY_FRACTION))
        env += [_var(k, v) for k, v in fabric.env.items()]
        if spec.communication.collective_permute == "nvshmem":
            env += [_var(k, v) for k, v in nvshmem_env(spec, fabric).items()]
    return env
