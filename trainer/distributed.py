"""Process identity from the JAX distributed environment and `jax.distributed` start-up.

The operator (and `longctx run`) give every worker process:
  JAX_COORDINATOR_ADDRESS  host:port of process 0's coordinator service
  JAX_NUM_PROCESSES        processes in the job
  JAX_PROCESS_ID           this process's index
  JAX_LOCAL_DEVICE_IDS     optional comma list of the local accelerators this process owns
A single process (JAX_NUM_PROCESSES unset or 1) needs none of them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import jax

from .contract import podenv


@dataclass(frozen=True)
class ProcessEnv:
    coordinator_address: str | None
    num_processes: int
    process_id: int
    local_device_ids: tuple[int, ...] | None
    processes_per_node: int = 1
    """Processes in this process's pod (the launcher's LONGCTX_PROCESSES_PER_POD): process i is on
    node i // processes_per_node."""

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] = os.environ) -> ProcessEnv:
        num_processes = int(environ.get(podenv.NUM_PROCESSES, "1"))
        process_id = int(environ.get(podenv.PROCESS_ID, "0"))
        coordinator = environ.get(podenv.COORDINATOR_ADDRESS) or None
        ids = environ.get(podenv.LOCAL_DEVICE_IDS, "").strip()
        local_ids = tuple(int(i) for i in ids.split(",") if i.strip()) if ids else None
        if num_processes < 1 or not 0 <= process_id < num_processes:
            raise ValueError(f"JAX_PROCESS_ID={process_id} is not in [0, JAX_NUM_PROCESSES={num_processes})")
        if num_processes > 1 and not coordinator:
            raise ValueError("JAX_COORDINATOR_ADDRESS (host:port) is required when JAX_NUM_PROCESSES > 1")
        per_node = environ.get(podenv.PROCESSES_PER_POD, "1")
        if not per_node.isdigit() or int(per_node) < 1 or num_processes % int(per_node):
            raise ValueError(
                f"{podenv.PROCESSES_PER_POD}={per_node} does not divide JAX_NUM_PROCESSES={num_processes} into nodes"
            )
        return cls(coordinator, num_processes, process_id, local_ids, int(per_node))


def initialize(env: ProcessEnv, communication: str = "nccl") -> None:
    """Join the job's processes (only when there are several) and check the NVSHMEM rule.

    Must run before anything touches a JAX device. CPU processes exchange collectives over gloo.
    """
    if env.num_processes > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=env.coordinator_address,
            num_processes=env.num_processes,
            process_id=env.process_id,
            local_device_ids=list(env.local_device_ids) if env.local_device_ids else None,
            # The pod environment names everything; JAX's own cluster detection would otherwise
            # try each cluster type, and its Kubernetes one reads a service-account token that
            # trainer pods do not mount (automountServiceAccountToken: false) and fails the start.
            cluster_detection_method="deactivate",
        )
    if communication == "nvshmem":
        local = jax.local_devices()
        if len(local) != 1 or local[0].platform != "gpu":
            raise SystemExit(
                "communication=nvshmem needs exactly one GPU per process; this process sees "
                f"{len(local)} {local[0].platform} device(s). Set processesPerNode = gpusPerNode "
                "(or JAX_LOCAL_DEVICE_IDS / CUDA_VISIBLE_DEVICES to a single GPU)."
            )
