"""`context_parallel_attention`: the entry point the model calls on global, sharded arrays."""

from __future__ import annotations

from typing import get_args

import jax
import numpy as np
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import PartitionSpec as P

from ..contract.config import DEFAULT_ATTENTION, DEFAULT_LOAD_BALANCE, Attention, LoadBalance, hybrid_split
from ..contract.load_balance import permutation
from ..doc_balance import MASK_LAYOUT, layout_block
from ..mesh import CONTEXT, DATA, HEADS, TENSOR, TOKENS
from .all_gather import make_all_gather_attention
from .chunked import LocalAttention, default_chunk
from .ring import make_ring_attention
from .token_ring import make_token_ring_attention
from .ulysses import make_ulysses_attention

PER_DEVICE = P((DATA, CONTEXT, TENSOR))  # one block per device, stacked: how residuals leave shard_map
ATTENTION_RESIDUALS = "attention_residuals"
"""The name of attention's residuals for its backward (remat policy save_attention keeps them)."""


def context_parallel_attention(
    q,
    k,
    v,
    *,
    mesh,
    causal: bool,
    impl: Attention = DEFAULT_ATTENTION,
    load_balance: LoadBalance = DEFAULT_LOAD_BALANCE,
    chunk_tokens=None,
    offload: bool = False,
    ulysses: int = 1,
    segments=None,
):
    """Exact attention over a (data, context, tensor) mesh.

    q: [batch, seq, heads, head_dim], k/v: [batch, seq, kv_heads, head_dim], tokens already in
    the `load_balance` layout order (`permutation(seq, context, load_balance)`), sharded
    P("data", "context", "tensor", None). Returns the output in the same order and sharding.
    `chunk_tokens` splits each device's shard into chunks (FPDT); `offload` keeps idle K/V
    chunks and the residuals for the backward in host memory where the backend has one.
    `ulysses`: the Ulysses group size of impl "hybrid" (a ring of context // ulysses groups).
    `segments` [batch, seq] (int32, same order and sharding as the tokens): document ids of packed
    documents; a token then attends only within
    its document, and chunk pairs of different documents are skipped. None: one document.
    `load_balance` "documents" (doc_balance.py, needs `segments`): the tokens are in a per-batch
    layout whose causal order within each document is that of the MASK_LAYOUT positions; the
    chunks default to the layout's blocks (`layout_block`), most of which hold one document.
    """
    context = mesh.shape[CONTEXT]
    if load_balance == "documents":
        if segments is None:
            raise ValueError("load_balance documents needs segments (the document mask)")
        load_balance = MASK_LAYOUT
        if chunk_tokens is None:  # the layout's blocks hold one document each: chunk by them
            chunk_tokens = default_chunk(layout_block(q.shape[1] // (2 * context)))
    seq = q.shape[1]
    positions = permutation(seq, context, load_balance).astype(np.int32) if causal else None
    if causal and load_balance == "dual_chunk_swap" and context > 1:
        chunk_tokens = _within_layout_chunks(seq // context, chunk_tokens)
    options = dict(positions=positions, scale=float(q.shape[-1]) ** -0.5, chunk_tokens=chunk_tokens, offload=offload)
    if impl not in get_args(Attention):
        raise ValueError(f"unknown attention impl {impl!r}; expected one of {get_args(Attention)}")
    heads = dict(heads=q.shape[2] // mesh.shape[TENSOR], kv_heads=k.shape[2] // mesh.shape[TENSOR])
    if impl == "ring" and context > 1:
        dual = causal and load_balance == "dual_chunk_swap"
        local = make_ring_attention(axis=CONTEXT, axis_size=context, dual_chunk_swap=dual, **options)
    elif impl == "token_ring" and context > 1:
        local = make_token_ring_attention(axis=CONTEXT, axis_size=context, **options)
    elif impl == "ulysses" and context > 1:
        local = make_ulysses_attention(axis=CONTEXT, axis_size=context, **heads, **options)
    elif impl == "hybrid" and context > 1:
        hybrid_split(context, ulysses)
        local = make_ulysses_attention(axis=CONTEXT, axis_size=context, ring=context // ulysses, **heads, **options)
    else:  # all-gather; at context 1 every impl is the local attention (all_gather.py)
        local = make_all_gather_attention(axis=CONTEXT, axis_size=context, **options)
    return _sharded(local, mesh)(q, k, v, segments)


def _sharded(local: LocalAttention, mesh):
    """f(q, k, v, segments) on global arrays: `local` inside shard_map, differentiated only through
    its own backward. The custom VJP sits outside shard_map: inside it, under the scan over
    layers, JAX linearized the chunk loops and kept every chunk pair's logits for the backward
    (seen as a 128 GiB buffer at 32K tokens on an H200). Residuals leave shard_map stacked one
    block per device (PER_DEVICE), whatever their shape, and each device gets its own back.

    check_vma=False: the loops' fresh accumulators (zeros, -inf) merge with per-device values;
    every output is genuinely per-device, nothing relies on replication checks."""
    in_specs = (HEADS,) * 3 + (TOKENS,)

    def per_device_fwd(q, k, v, segments):
        out, residuals = local.fwd(q, k, v, segments)
        return out, jax.tree.map(lambda x: x[None], residuals)

    def per_device_bwd(residuals, do):
        dq, dk, dv = local.bwd(jax.tree.map(lambda x: x[0], residuals), do)
        return dq.astype(do.dtype), dk.astype(do.dtype), dv.astype(do.dtype)

    def forward(q, k, v, segments):
        out, residuals = jax.shard_map(
            per_device_fwd, mesh=mesh, in_specs=in_specs, out_specs=(HEADS, PER_DEVICE), check_vma=False
        )(q, k, v, segments)
        return out, checkpoint_name(residuals, ATTENTION_RESIDUALS)

    @jax.custom_vjp
    def attention(q, k, v, segments):
        return forward(q, k, v, segments)[0]

    def attention_bwd(residuals, do):
        dq, dk, dv = jax.shard_map(
            per_device_bwd,
            mesh=mesh,
            in_specs=(PER_DEVICE, HEADS),
            out_specs=(HEADS,) * 3,
            check_vma=False,
        )(residuals, do)
        return dq, dk, dv, None

    attention.defvjp(forward, attention_bwd)
    return attention


def _within_layout_chunks(shard_tokens: int, chunk_tokens):
    """A dual-chunk-swap shard is an early and a late chunk: a block spanning both is never
    entirely in the past or the future of another, so no block could be skipped. Splitting at
    the chunk boundary lets the causal skip drop the fully masked half of the work. Without
    `chunk_tokens`, the half is cut further into the default blocks (`chunked.default_chunk`)."""
    half = shard_tokens // 2
    if chunk_tokens is None:
        return default_chunk(half)
    return half if chunk_tokens > half else chunk_tokens
