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
COMPILATION_CACHE_DIR = "JAX_COMPILATION_CACHE_DIR"
"""JAX's persistent compilation cache (a job may set it): where set, the trainer leaves the cache
there; otherwise it keeps it beside a local checkpoint directory (trainer/compile_cache.py)."""

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
FAULT_FREEZE_IN_RENDEZVOUS = "LONGCTX_FAULT_FREEZE_IN_RENDEZVOUS"
"""Fault injection, for tests (a job may set it): the JAX process id of the rank that stops itself
(SIGSTOP) in the rendezvous, before it joins, once its health metrics have been read (the JAX
trainer, trainer/faults.py): a rank that never joins, as the operator sees one."""
FAULT_EXIT_AT_STEP = "LONGCTX_FAULT_EXIT_AT_STEP"
"""Fault injection, for tests (a job may set it): `<process id>:<step>`, the JAX process that exits
(FAULT_EXIT_CODE, at once, as a crashed one would) after finishing that step, in the first epoch of
its pod's launcher only (RESTART_EPOCH unset or 0), so an in-place restart runs on (trainer/faults.py)."""

# In-place restart (trainer/inplace.py), rendered only where spec.restartPolicy.inPlace is on: rank
# 0's launcher serves the gang's restart coordinator at RESTART_ADDRESS (rank 0's host and
# spec.network.restartPort), every launcher connects to it; IN_PLACE_RESTARTS is the gang's budget
# of in-place restarts per generation. RESTART_EPOCH is the launcher's to its trainer processes:
# how many in-place restarts came before them (0: the pod's first).
RESTART_ADDRESS = "LONGCTX_RESTART_ADDRESS"
IN_PLACE_RESTARTS = "LONGCTX_IN_PLACE_RESTARTS"
RESTART_EPOCH = "LONGCTX_RESTART_EPOCH"

# Where the process runs (contract/topology.py): its node's name (downward API spec.nodeName), the
# node label keys of the topology levels, outermost first (comma list), each level's value for
# this pod (downward API metadata.labels: empty where the label was not copied onto the pod), and
# whether the ranks are ordered by that placement or kept in index order (Kueue placed them).
NODE_NAME = "LONGCTX_NODE_NAME"
TOPOLOGY_LEVELS = "LONGCTX_TOPOLOGY_LEVELS"
TOPOLOGY_LEVEL_PREFIX = "LONGCTX_TOPOLOGY_LEVEL_"
RANK_ORDER = "LONGCTX_RANK_ORDER"
PLACEMENT_FILE = "LONGCTX_PLACEMENT_FILE"
"""Where the pod's placement annotation appears (a downward-API volume file, updated when the
operator writes the annotation after binding: an env var would keep its value at start); unset or
empty: the ranks order by the pod-label values above alone."""
PLACEMENT_TABLE = "LONGCTX_PLACEMENT_TABLE"
"""Where the gang's placement table appears (a ConfigMap file, there from the start): the placement
of each node the gang may run on; a rank whose node it holds reads its placement there and waits
for no annotation."""


def topology_level(index: int) -> str:
    """The variable holding this pod's domain at topology level `index` (0: outermost)."""
    return f"{TOPOLOGY_LEVEL_PREFIX}{index}"


# The planned layout, for any trainer (the bundled one reads its config file; a trainer brought in
# its own image reads these): parallelism degrees, tokens per sequence, FPDT chunk (0: no offload)
# and the path of the rendered trainer config.
DATA_PARALLEL = "LONGCTX_DATA_PARALLEL"
CONTEXT_PARALLEL = "LONGCTX_CONTEXT_PARALLEL"
TENSOR_PARALLEL = "LONGCTX_TENSOR_PARALLEL"
SEQUENCE_LENGTH = "LONGCTX_SEQUENCE_LENGTH"
OFFLOAD_CHUNK_TOKENS = "LONGCTX_OFFLOAD_CHUNK_TOKENS"
CONFIG = "LONGCTX_CONFIG"

# torch.distributed's env:// rendezvous and torchrun (PET_* are torchrun's own flag variables).
MASTER_ADDR = "MASTER_ADDR"
MASTER_PORT = "MASTER_PORT"
WORLD_SIZE = "WORLD_SIZE"
RANK = "RANK"
LOCAL_RANK = "LOCAL_RANK"
NODE_RANK = "NODE_RANK"
NNODES = "NNODES"
LOCAL_WORLD_SIZE = "LOCAL_WORLD_SIZE"
TORCHRUN = {
    "PET_NNODES": NNODES,
    "PET_NPROC_PER_NODE": LOCAL_WORLD_SIZE,
    "PET_NODE_RANK": NODE_RANK,
    "PET_MASTER_ADDR": MASTER_ADDR,
    "PET_MASTER_PORT": MASTER_PORT,
}
"""torchrun's variable -> the torch.distributed name holding the same value."""

RESERVED = frozenset(
    {
        COORDINATOR_ADDRESS,
        NUM_PROCESSES,
        PROCESS_ID,
        LOCAL_DEVICE_IDS,
        PLATFORMS,
        XLA_FLAGS,
        GPU_MEMORY_FRACTION,
        COMPLETION_INDEX,
        MASTER_ADDR,
        MASTER_PORT,
        WORLD_SIZE,
        RANK,
        LOCAL_RANK,
        NODE_RANK,
        NNODES,
        LOCAL_WORLD_SIZE,
        *TORCHRUN,
    }
)
"""Names a job's `spec.env` may not set: they decide which process is which, or which devices and
how much of their memory it takes; a wrong value hangs or corrupts the whole gang."""
RESERVED_PREFIX = "LONGCTX_"
"""Every LONGCTX_* name is the operator's, except those in USER_SETTABLE."""
USER_SETTABLE = frozenset({PEAK_FLOPS, FAULT_FREEZE_IN_RENDEZVOUS, FAULT_EXIT_AT_STEP})


def reserved(name: str) -> bool:
    """Whether a job's own env may not set `name`."""
    return name in RESERVED or (name.startswith(RESERVED_PREFIX) and name not in USER_SETTABLE)
