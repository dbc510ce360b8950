"""Training data: synthetic tokens, memory-mapped token files and byte-level text.

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

import json
from pathlib import Path
from typing import NamedTuple, Protocol

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding

from .config import BYTE_VOCAB, TEXT_DOCUMENT_SEPARATOR, DataConfig, PackingConfig, TrainerConfig, token_file_record
from .model import TOKENS


class Documents(NamedTuple):
    """The packed documents of a batch, each [batch, seq] like the inputs, in natural token order."""

    segments: jax.Array  # document index of each input token within its window (int32)
    positions: jax.Array  # its position within its document, from 0 (int32)
    loss_mask: jax.Array  # False where the target starts the next document (the input is a separator)


def document_layout(window: np.ndarray, separator: int) -> dict[str, np.ndarray]:
    """Documents of one window of sequence + 1 tokens: `Documents`' fields for its inputs. A
    separator belongs to the document it ends; the window may begin or end inside a document."""
    ends = window == separator
    segments = np.concatenate([[0], np.cumsum(ends[:-1])]).astype(np.int32)
    index = np.arange(len(window))
    starts = np.maximum.accumulate(np.where(np.concatenate([[True], segments[1:] != segments[:-1]]), index, 0))
    return {
        "segments": segments[:-1],
        "positions": (index - starts)[:-1].astype(np.int32),
        "loss_mask": segments[1:] == segments[:-1],
    }


def document_separator(data: DataConfig) -> int:
    """The token that ends each document: packing.separator, else the token file's recorded
    end-of-text id, else NUL for text."""
    if data.packing.separator is not None:
        return data.packing.separator
    if data.kind == "text":
        return TEXT_DOCUMENT_SEPARATOR
    sidecar = token_file_record(data.path)
    try:
        return int(json.loads(sidecar.read_text())["end_of_text"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"data.packing needs the end-of-text id of {data.path}: set packing.separator, or write the file "
            f"with `longctx tokenize`, which records it in {sidecar.name} ({error})"
        ) from None


class TokenSource(Protocol):
    def sample(self, index: int) -> np.ndarray:
        """Window `index`: sequence_length + 1 token ids (inputs and shifted targets)."""


class SyntheticTokens:
    """Uniform random tokens, seeded per sample."""

    def __init__(self, vocab: int, sequence_length: int, seed: int):
        self.vocab, self.window, self.seed = vocab, sequence_length + 1, seed

    def sample(self, index: int) -> np.ndarray:
        rng = np.random.default_rng((self.seed, index))
        return rng.integers(0, self.vocab, self.window, dtype=np.int32)


class CorpusWindows:
    """Windows of sequence_length + 1 tokens starting every sequence_length tokens (neighbours share
    one token, so every token is a target once), visited in a seeded order reshuffled each epoch."""

    def __init__(self, stream: np.ndarray, sequence_length: int, seed: int):
        self.stream, self.window, self.seed = stream, sequence_length + 1, seed
        self.count = (len(stream) - 1) // sequence_length
        if self.count < 1:
            raise ValueError(
                f"corpus of {len(stream)} tokens is shorter than one sequence of {sequence_length} + 1 tokens"
            )
        self._epoch, self._order = -1, np.empty(0, np.int64)

    def sample(self, index: int) -> np.ndarray:
        epoch, slot = divmod(index, self.count)
        if epoch != self._epoch:
            self._epoch = epoch
            self._order = np.random.default_rng((self.seed, epoch)).permutation(self.count)
        start = int(self._order[slot]) * (self.window - 1)
        return np.asarray(self.stream[start : start + self.window], dtype=np.int32)


def token_file(path: str | Path, vocab: int) -> np.ndarray:
    """A .bin file of token ids, memory-mapped: uint16 when the vocabulary fits, else uint32."""
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    return np.memmap(path, dtype=dtype, mode="r")


def text_bytes(path: str | Path, separator: int | None = None) -> np.ndarray:
    """Byte-level tokens of a text file (memory-mapped) or of every text file under a directory.

    In a directory, binary files (those containing a NUL byte, e.g. __pycache__/*.pyc) are skipped;
    with a `separator` byte, each file is one document and ends with it.
    """
    path = Path(path)
    if path.is_file():
        return np.memmap(path, dtype=np.uint8, mode="r")
    texts = [b for b in (p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()) if b"\x00" not in b]
    if not texts:
        raise ValueError(f"no text files under {path}")
    end = b"" if separator is None else bytes([separator])
    return np.frombuffer(b"".join(text + end for text in texts), dtype=np.uint8)


def make_source(data: DataConfig, vocab: int, sequence_length: int) -> TokenSource:
    if data.kind == "synthetic":
        return SyntheticTokens(vocab, sequence_length, data.seed)
    if data.kind == "tokens":
        return CorpusWindows(token_file(data.path, vocab), sequence_length, data.seed)
    if vocab < BYTE_VOCAB:
        raise ValueError(f"byte-level text needs a vocabulary of at least {BYTE_VOCAB}, the model has {vocab}")
    separator = document_separator(data) if data.packing.enabled else None
    if separator is not None and separator >= BYTE_VOCAB:
        raise ValueError(f"data.packing.separator {separator} is not a byte (text is byte-level)")
    return CorpusWindows(text_bytes(data.path, separator), sequence_length, data.seed)


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
