"""The device mesh (data, context, tensor) over every process's devices.

Axis order is fixed and shared with the attention ops and the planner: tensor is innermost so
tensor-parallel groups stay inside a node (consecutive devices), context next, data outermost.
The axes are Auto (GSPMD): the model places activations with sharding constraints and XLA
propagates the rest; the attention ops enter manual mode themselves with jax.shard_map.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh
from jax.sharding import PartitionSpec as P

from .contract.config import ParallelConfig

DATA, CONTEXT, TENSOR = "data", "context", "tensor"
AXES = (DATA, CONTEXT, TENSOR)
# Parameters and optimizer state are ZeRO-3 sharded over every non-tensor device.
FSDP = (DATA, CONTEXT)
# The activations' shardings, for the model and the attention ops alike: batch over data, the
# sequence over context, heads and the FFN width over tensor.
TOKENS = P(DATA, CONTEXT)  # [batch, seq]
ACTIVATION = P(DATA, CONTEXT, None)  # [batch, seq, hidden]
HEADS = P(DATA, CONTEXT, TENSOR, None)  # [batch, seq, heads, head_dim]
FFN = P(DATA, CONTEXT, TENSOR)  # [batch, seq, ffn]
LOSS_CHUNK = P(DATA, CONTEXT, None, None)  # [batch, seq / chunk, chunk, hidden]: the chunked loss
LOSS_LOGITS = P(DATA, CONTEXT, None, TENSOR)  # [batch, seq / chunk, chunk, vocab]


def make_mesh(parallel: ParallelConfig, devices: Sequence[jax.Device] | None = None) -> Mesh:
    """Mesh over `devices` in their order (default: all devices of all processes), which must
    match the layout: consecutive devices fill the tensor axis, then the context axis."""
    devices = list(jax.devices() if devices is None else devices)
    if len(devices) != parallel.devices:
        raise ValueError(
            f"layout data={parallel.data} x context={parallel.context} x tensor={parallel.tensor} "
            f"needs {parallel.devices} devices, but {len(devices)} are available"
        )
    # Mesh, not jax.make_mesh: on GPUs make_mesh sorts the devices by id, which would undo the
    # topology order of the rings (topology.py).
    shape = (parallel.data, parallel.context, parallel.tensor)
    return Mesh(np.asarray(devices).reshape(shape), AXES, axis_types=(AxisType.Auto,) * len(AXES))
