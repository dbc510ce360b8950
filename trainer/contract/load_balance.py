"""Token layouts that balance causal attention work over the context axis.

With causal attention and the sequence split contiguously over C devices, device C-1 does C times
the work of device 0. A layout is a permutation of token positions applied once at the model input
(`tokens[:, perm]`); the permuted sequence is then split contiguously over the context axis, and
`perm` itself gives every token's true position (for RoPE and the causal mask).

- "dual_chunk_swap": 2C chunks; device i holds chunks i and 2C-1-i (an early and a late one).
- "striped": device i holds tokens i, i+C, i+2C, ... (round-robin).
- "none": identity (device i holds chunk i).
- "documents": per batch, from the documents' boundaries (doc_balance.py); not a fixed permutation.
"""

from __future__ import annotations

from typing import get_args

import numpy as np

from .config import LoadBalance, sequence_split

SCHEMES = tuple(s for s in get_args(LoadBalance) if s != "documents")  # the fixed ones


def permutation(seq_len: int, context: int, scheme: LoadBalance) -> np.ndarray:
    """Positions of the tokens in layout order: `perm[j]` is the true position of slot j."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown fixed load-balance scheme {scheme!r}; expected one of {SCHEMES}")
    pieces = sequence_split(scheme, context)  # the config's own rule, also at context 1
    if seq_len % pieces:
        raise ValueError(f"seq_len {seq_len} is not divisible by {pieces} ({scheme} over context {context})")
    positions = np.arange(seq_len)
    if scheme == "none" or context == 1:
        return positions
    if scheme == "striped":
        return positions.reshape(seq_len // context, context).T.reshape(-1)
    chunks = positions.reshape(pieces, -1)
    order = [c for i in range(context) for c in (i, 2 * context - 1 - i)]
    return chunks[order].reshape(-1)


def inverse_permutation(seq_len: int, context: int, scheme: LoadBalance) -> np.ndarray:
    """`x_permuted[:, inverse] == x` for `x_permuted = x[:, perm]`."""
    return np.argsort(permutation(seq_len, context, scheme))
