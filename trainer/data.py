"""Training data: global batches of the token sources (sources.py) sharded over the mesh.

Every source is a deterministic function of (seed, sample index): the batch of step `s` holds
samples s*B .. s*B+B-1. The data position is therefore just the number of samples consumed,
which the checkpoint records, and a resumed run reads exactly what an uninterrupted one would.
Each process materialises only the rows (and sequence columns) of the global batch that its
own devices hold (`jax.make_array_from_callback`), so every data-parallel rank reads its shard.

Packed documents (`data.packing`): a separator token ends each document (the end-of-text id for
token files, NUL between the files of a text directory). Each window then also yields, per input
token, its document's index within the window, its position within its document and whether its
target lies in the same document (`Documents`), all derived from the window alone, so a shard
needs no other shard's tokens.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from .contract.config import PackingConfig, TrainerConfig
from .contract.sources import TokenSource, document_layout, document_separator, make_source
from .model import TOKENS


class Documents(NamedTuple):
    """The packed documents of a batch, each [batch, seq] like the inputs, in natural token order
    (`sources.document_layout`'s fields)."""

    segments: jax.Array  # document index of each input token within its window (int32)
    positions: jax.Array  # its position within its document, from 0 (int32)
    loss_mask: jax.Array  # False where the target starts the next document (the input is a separator)


class Batches:
    """Global batches [batch, seq] sharded (data, context) on the mesh: (inputs, targets,
    documents), documents a `Documents` with data.packing, else None."""

    def __init__(self, config: TrainerConfig, mesh: Mesh, source: TokenSource | None = None):
        self.batch_size, self.seq = config.batch_size, config.sequence_length
        self.source = source or make_source(config.data, config.model.vocab, self.seq)
        self.sharding = NamedSharding(mesh, TOKENS)
        packing: PackingConfig = config.data.packing
        self.separator = document_separator(config.data) if packing.enabled else None

    def for_step(self, step: int) -> tuple[jax.Array, jax.Array, Documents | None]:
        rows: dict[int, dict[str, np.ndarray]] = {}  # shared by the callbacks of this step's shards
        shape = (self.batch_size, self.seq)

        def array(field: str) -> jax.Array:
            return jax.make_array_from_callback(
                shape, self.sharding, lambda index: self.piece(step, index, field, rows)
            )

        if self.separator is None:
            return array("inputs"), array("targets"), None
        return array("inputs"), array("targets"), Documents(*(array(f) for f in Documents._fields))

    def piece(self, step: int, index: tuple[slice, slice], field: str, rows: dict[int, dict]) -> np.ndarray:
        """Rows and columns `index` of one of step's arrays: "inputs", "targets" or a field of
        `Documents`. Reads only the samples of those rows: a process builds just its devices' shards.
        """
        first = step * self.batch_size
        pieces = []
        for row in range(self.batch_size)[index[0]]:
            if row not in rows:
                rows[row] = self._row(self.source.sample(first + row))
            pieces.append(rows[row][field][index[1]])
        return np.stack(pieces)

    def _row(self, window: np.ndarray) -> dict[str, np.ndarray]:
        fields = {"inputs": window[:-1], "targets": window[1:]}
        if self.separator is not None:
            fields |= document_layout(window, self.separator)
        return fields

    def position(self, step: int) -> int:
        """Samples consumed before `step` (the data position stored in checkpoints)."""
        return step * self.batch_size
