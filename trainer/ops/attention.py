"""`context_parallel_attention`: the entry point the model calls on global, sharded arrays."""

from __future__ import annotations

from typing import get_args

import jax
import numpy as np
from jax.sharding import PartitionSpec as P

from ..config import Attention, hybrid_split
from ..load_balance import permutation
from ..mesh import CONTEXT, DATA, TENSOR
from .all_gather import make_all_gather_attention
from .ring import make_ring_attention
from .ulysses import make_ulysses_attention

ACTIVATION_SPEC = P(DATA, CONTEXT, TENSOR, None)


def context_parallel_attention(
    q,
    k,
    v,
    *,
    mesh,
    causal: bool,
    impl: str = "ring",
    load_balance: str = "dual_chunk_swap",
    chunk_tokens=None,
    offload: bool = False,
    ulysses: int = 1,
):
    """Exact attention over a (data, context, tensor) mesh.

    q: [batch, seq, heads, head_dim], k/v: [batch, seq, kv_heads, head_dim], tokens already in
    the `load_balance` layout order (`permutation(seq, context, load_balance)`), sharded
    P("data", "context", "tensor", None). Returns the output in the same order and sharding.
    `chunk_tokens` splits each device's shard into chunks (FPDT); `offload` keeps idle K/V
    chunks and the residuals for the backward in host memory where the backend has one.
    `ulysses`: the Ulysses group size of impl "hybrid" (a ring of context // ulysses groups).
    """
    context = mesh.shape[CONTEXT]
    seq = q.shape[1]
    positions = permutation(seq, context, load_balance).astype(np.int32) if causal else None
    if causal and load_balance == "dual_chunk_swap" and context > 1:
        chunk_tokens = _within_layout_chunks(seq // context, chunk_tokens)
    options = dict(positions=positions, scale=float(q.shape[-1]) ** -0.5, chunk_tokens=chunk_tokens, offload=offload)
    if impl not in get_args(Attention):
        raise ValueError(f"unknown attention impl {impl!r}; expected one of {get_args(Attention)}")
    if impl == "ring" and context > 1:
        local = make_ring_attention(axis=CONTEXT, axis_size=context, **options)
    elif impl == "ulysses" and context > 1:
        local = make_ulysses_attention(axis=CONTEXT, axis_size=context, **options)
    elif impl == "hybrid" and context > 1:
        hybrid_split(context, ulysses)
        local = make_ulysses_attention(axis=CONTEXT, axis_size=context, ring=context // ulysses, **options)
    else:  # at context 1 both are the local chunked attention (its K/V offload included)
        local = make_all_gather_attention(axis=CONTEXT, **options)
    # check_vma=False: the loops' fresh accumulators (zeros, -inf) merge with per-device values;
    # every output is genuinely per-device (sharded like q), nothing relies on replication checks.
    return jax.shard_map(local, mesh=mesh, in_specs=(ACTIVATION_SPEC,) * 3, out_specs=ACTIVATION_SPEC, check_vma=False)(
        q, k, v
    )


def _within_layout_chunks(shard_tokens: int, chunk_tokens):
    """A dual-chunk-swap shard is an early and a late chunk: a block spanning both is never
    entirely in the past or the future of another, so no block could be skipped. Splitting at
    the chunk boundary lets the causal skip drop the fully masked half of the work."""
    half = shard_tokens // 2
    return half if chunk_tokens is None or chunk_tokens > half else chunk_tokens
