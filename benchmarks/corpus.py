"""The synthetic packed corpus of the attention benchmarks (CPU and GPU) and of the tests that
check their distribution: numpy only, so each benchmark imports it before choosing its platform."""

from __future__ import annotations

import numpy as np


def document_segments(seq: int, mean_tokens: int, seed: int = 0) -> np.ndarray:
    """[1, seq] document ids, lengths drawn from an exponential distribution of mean `mean_tokens`."""
    rng = np.random.default_rng(seed)
    lengths, left = [], seq
    while left:
        length = min(left, max(1, int(rng.exponential(mean_tokens))))
        lengths.append(length)
        left -= length
    return np.repeat(np.arange(len(lengths)), lengths)[None].astype(np.int32)
