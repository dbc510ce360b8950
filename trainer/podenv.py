"""The pod environment contract: the variable names the operator renders into every trainer
container and the launcher, `longctx run` and the trainer read. Plain names, no JAX import, so
both sides (and the API's rule that a job's own `env` may not override them) share one list.
"""

from __future__ import annotations

# JAX distributed identity (jax.distributed.initialize reads these names).
COORDINATOR_ADDRESS = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"
LOCAL_DEVICE_IDS = "JAX_LOCAL_DEVICE_IDS"
PLATFORMS = "JAX_PLATFORMS"
XLA_FLAGS = "XLA_FLAGS"
GPU_MEMORY_FRACTION = "XLA_PYTHON_CLIENT_MEM_FRACTION"

# Set by the Job controller in every pod of an Indexed Job.
COMPLETION_INDEX = "JOB_COMPLETION_INDEX"

# longctx's own: processes per pod, devices per process, the process's number inside its pod
# (offsets its metrics port) and the workload generation.
PROCESSES_PER_POD = "LONGCTX_PROCESSES_PER_POD"
DEVICES_PER_PROCESS = "LONGCTX_DEVICES_PER_PROCESS"
LOCAL_PROCESS_ID = "LONGCTX_LOCAL_PROCESS_ID"
GENERATION = "LONGCTX_GENERATION"
PEAK_FLOPS = "LONGCTX_PEAK_FLOPS"
"""Optional override of the device's peak FLOP/s for MFU (a job may set it)."""

RESERVED = frozenset({COORDINATOR_ADDRESS, NUM_PROCESSES, PROCESS_ID, LOCAL_DEVICE_IDS, PLATFORMS,
                      XLA_FLAGS, GPU_MEMORY_FRACTION, COMPLETION_INDEX})
"""Names a job's `spec.env` may not set: they decide which process is which, or which devices and
how much of their memory it takes; a wrong value hangs or corrupts the whole gang."""
RESERVED_PREFIX = "LONGCTX_"
"""Every LONGCTX_* name is the operator's, except those in USER_SETTABLE."""
USER_SETTABLE = frozenset({PEAK_FLOPS})


def reserved(name: str) -> bool:
    """Whether a job's own env may not set `name`."""
    return name in RESERVED or (name.startswith(RESERVED_PREFIX) and name not in USER_SETTABLE)
