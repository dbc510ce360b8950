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

With adaptive context parallelism (`parallelism.adaptive`, adaptive_cp.py) every row of the step
is read on every process (the variant must fit them all) and laid out the same way, with padding
slots (document `PAD_SEGMENT`, loss weight 0); `Batches.ring(step)` is the variant's ring part.

With the documents layout (`parallelism.loadBalance: documents`, doc_balance.py) each row is
reordered here, on the host, when its first shard is read: inputs, targets and every document
field by the row's permutation, plus `Documents.order`, the true positions. The training loop
reads the next step's batch while the current step runs, so the reordering overlaps it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from .adaptive_cp import PAD, PAD_SEGMENT, batch_layout
from .contract.config import PackingConfig, TrainerConfig
from .contract.sources import TokenSource, document_layout, document_separator, make_source
from .doc_balance import document_permutation
from .mesh import CONTEXT, TOKENS


class Documents(NamedTuple):
    """The packed documents of a batch, each [batch, seq] like the inputs, in natural token order
    (`sources.document_layout`'s fields)."""

    segments: jax.Array  # document index of each input token within its window (int32)
    positions: jax.Array  # its position within its document, from 0 (int32)
    loss_mask: jax.Array  # False where the target starts the next document (the input is a separator)
    order: jax.Array | None = None  # documents/adaptive layout: each slot's true position; all in layout order


PAD_VALUES = {"segments": PAD_SEGMENT, "loss_mask": False}
"""What an adaptive layout's padding slot holds (others: 0)."""


class Batches:
    """Global batches [batch, seq] sharded (data, context) on the mesh: (inputs, targets,
    documents), documents a `Documents` with data.packing, else None."""

    def __init__(self, config: TrainerConfig, mesh: Mesh, source: TokenSource | None = None):
        self.batch_size, self.seq = config.batch_size, config.sequence_length
        self.source = source or make_source(config.data, config.model.vocab, self.seq)
        self.sharding = NamedSharding(mesh, TOKENS)
        packing: PackingConfig = config.data.packing
        self.separator = document_separator(config.data) if packing.enabled else None
        self.context = mesh.shape[CONTEXT] if config.parallelism.load_balance == "documents" else None
        self.adaptive = mesh.shape[CONTEXT] if config.parallelism.adaptive else None

    def for_step(self, step: int) -> tuple[jax.Array, jax.Array, Documents | None]:
        rows: dict[int, dict[str, np.ndarray]] = {}  # shared by the callbacks of this step's shards
        shape = (self.batch_size, self.seq)
        if self.adaptive:
            rows, _ = self._adaptive(step)
            shape = (self.batch_size, len(rows[0]["inputs"]))

        def array(field: str) -> jax.Array:
            return jax.make_array_from_callback(
                shape, self.sharding, lambda index: self.piece(step, index, field, rows)
            )

        if self.separator is None:
            return array("inputs"), array("targets"), None
        fields = Documents._fields if self.context or self.adaptive else Documents._fields[:-1]
        return array("inputs"), array("targets"), Documents(*(array(f) for f in fields))

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

    def ring(self, step: int) -> int | None:
        """The ring part of step's adaptive variant (tokens per device), None without adaptive."""
        return self._adaptive(step)[1] if self.adaptive else None

    @lru_cache(maxsize=2)  # noqa: B019  (this step's and the next; the Batches lives as long as the run)
    def _adaptive(self, step: int) -> tuple[dict[int, dict[str, np.ndarray]], int]:
        first = step * self.batch_size
        natural = [self._row(self.source.sample(first + row)) for row in range(self.batch_size)]
        segments = np.stack([row["segments"] for row in natural])
        layouts = batch_layout(segments, self.adaptive)
        rows = {}
        for row, (fields, layout) in enumerate(zip(natural, layouts, strict=True)):
            pad = layout.slots == PAD
            take = np.where(pad, 0, layout.slots)
            rows[row] = {name: np.where(pad, PAD_VALUES.get(name, 0), x[take]) for name, x in fields.items()}
            rows[row]["order"] = take.astype(np.int32)
        return rows, layouts[0].variant.ring

    def _row(self, window: np.ndarray) -> dict[str, np.ndarray]:
        fields = {"inputs": window[:-1], "targets": window[1:]}
        if self.separator is not None:
            fields |= document_layout(window, self.separator)
        if self.context:
            perm = document_permutation(fields["segments"], self.context)
            fields = {name: x[perm] for name, x in fields.items()} | {"order": perm.astype(np.int32)}
        return fields

    def position(self, step: int) -> int:
        """Samples consumed before `step` (the data position stored in checkpoints)."""
        return step * self.batch_size
