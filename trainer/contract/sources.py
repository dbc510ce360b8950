"""Token sources: synthetic tokens, memory-mapped token files and byte-level text, as numpy.

Every source is a deterministic function of (seed, sample index), and plain numpy: the JAX
trainer's batches (data.py) and the PyTorch example trainer (pytorch/) read the same windows.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

import numpy as np

from .config import BYTE_VOCAB, TEXT_DOCUMENT_SEPARATOR, DataConfig, token_file_record


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


def document_separator(data: DataConfig) -> int:
    """The token that ends each document under data.packing: packing.separator, else the token
    file's recorded end-of-text id, else NUL for text."""
    if data.packing.separator is not None:
        return data.packing.separator
    if data.kind == "text":
        return TEXT_DOCUMENT_SEPARATOR
    record = token_file_record(data.path)
    try:
        return int(json.loads(record.read_text())["end_of_text"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"data.packing needs the end-of-text id of {data.path}: set packing.separator, or write the file "
            f"with `longctx tokenize`, which records it in {record.name} ({error})"
        ) from None


def document_layout(window: np.ndarray, separator: int) -> dict[str, np.ndarray]:
    """Documents of one window of sequence + 1 tokens, per input token: "segments" (its
    document's index in the window), "positions" (its position in its document) and "loss_mask"
    (its target is in the same document). A separator belongs to the document it ends; the window
    may begin or end inside a document."""
    ends = window == separator
    segments = np.concatenate([[0], np.cumsum(ends[:-1])]).astype(np.int32)
    index = np.arange(len(window))
    starts = np.maximum.accumulate(np.where(np.concatenate([[True], segments[1:] != segments[:-1]]), index, 0))
    return {
        "segments": segments[:-1],
        "positions": (index - starts)[:-1].astype(np.int32),
        "loss_mask": segments[1:] == segments[:-1],
    }


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
