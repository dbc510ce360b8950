"""Training data: global batches of the token sources (sources.py) sharded over the mesh.

Every source is a deterministic function of (seed, sample index): the batch of step `s` holds
samples s*B .. s*B+B-1. The data position is therefore just the number of samples consumed,
which the checkpoint records, and a resumed run reads exactly what an uninterrupted one would.
Each process materialises only the rows (and sequence columns) of the global batch that its
own devices hold (`jax.make_array_from_callback`), so every data-parallel rank reads its shard.
"""

from __future__ import annotations

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from .config import TrainerConfig
from .model import TOKENS
from .sources import TokenSource, make_source


class Batches:
    """Global batches (inputs, targets) [batch, seq] sharded (data, context) on the mesh."""

    def __init__(self, config: TrainerConfig, mesh: Mesh, source: TokenSource | None = None):
        self.batch_size, self.seq = config.batch_size, config.sequence_length
        self.source = source or make_source(config.data, config.model.vocab, self.seq)
        self.sharding = NamedSharding(mesh, TOKENS)

    def for_step(self, step: int) -> tuple[jax.Array, jax.Array]:
        windows: dict[int, np.ndarray] = {}  # shared by the callbacks of this step's shards
        shape = (self.batch_size, self.seq)
        inputs = jax.make_array_from_callback(shape, self.sharding, lambda index: self.piece(step, index, 0, windows))
        targets = jax.make_array_from_callback(shape, self.sharding, lambda index: self.piece(step, index, 1, windows))
        return inputs, targets

    def piece(self, step: int, index: tuple[slice, slice], shift: int, windows: dict[int, np.ndarray]) -> np.ndarray:
        """Rows and columns `index` of step's inputs (shift 0) or targets (shift 1).

        Reads only the samples of those rows: a process builds just its devices' shards.
        """
        first = step * self.batch_size
        rows = []
        for row in range(self.batch_size)[index[0]]:
            if row not in windows:
                windows[row] = self.source.sample(first + row)
            rows.append(windows[row][shift : shift + self.seq][index[1]])
        return np.stack(rows)

    def position(self, step: int) -> int:
        """Samples consumed before `step` (the data position stored in checkpoints)."""
        return step * self.batch_size
