"""FPDT-style chunked attention of local queries against a K/V range, optionally host-offloaded.

Queries are processed one chunk of `chunk_tokens` at a time against one K/V chunk at a time, so
the temporaries are chunk x chunk logits instead of shard x shard. With `kv_on_host`, the K/V
chunks wait in host memory and each one is fetched while the previous chunk computes (the fetch
of chunk j+1 is issued in iteration j and carried into iteration j+1: double buffering).

Chunk pairs in which no query can see any key are skipped (`lax.switch` on a decision taken from
the chunks' min/max positions and document ids): causally, keys all in the future of all queries;
with packed documents, keys all in other documents than the queries'. Pairs in which every query
sees every key run without a mask (cuDNN-eligible on GPU); the rest are masked.

These are the bodies of the attentions' forward and backward (`LocalAttention`): they are run,
never differentiated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .block import F32, block_backward, block_forward, merge_partials
from .offload import to_device, to_host

SKIP, FULL, MASKED = 0, 1, 2


class LocalAttention(NamedTuple):
    """One device's share of an attention, as the forward and backward that `jax.custom_vjp`
    joins around the whole `shard_map` (ops/attention.py), so no differentiation ever enters it.

    fwd(q, k, v, segments) -> (out, residuals): out in q's dtype, residuals a pytree of arrays.
    bwd(residuals, do) -> (dq, dk, dv) in fp32."""

    fwd: Callable
    bwd: Callable


class Span(NamedTuple):
    """Where a run of tokens sits: true positions [t] for the causal mask (None: not causal) and
    document ids [b, t] for the document mask (None: one document per sequence)."""

    pos: jax.Array | None = None
    seg: jax.Array | None = None

    @property
    def masked(self) -> bool:
        return self.pos is not None or self.seg is not None

    def chunks(self, count):
        """The span of each of `count` equal chunks, stacked: pos [count, t/count], seg [count, b, t/count]."""
        return Span(
            None if self.pos is None else self.pos.reshape(count, -1),
            None if self.seg is None else _split(self.seg, count),
        )


def _split(x, chunks):
    """[b, t, ...] -> [chunks, b, t / chunks, ...]."""
    b, t = x.shape[:2]
    return jnp.moveaxis(x.reshape(b, chunks, t // chunks, *x.shape[2:]), 1, 0)


def _join(x):
    """Inverse of `_split`."""
    return jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:])


MAX_BLOCK_TOKENS = 4096
"""Without `chunk_tokens`, a shard is still cut into blocks of at most this many tokens: a masked
block materialises its fp32 logits (4096^2 x 4 bytes x heads), and a whole 32K shard as one block
needs 128 GiB for 32 heads (seen on an H200, 2026-11-26)."""


CPU_BLOCK_TOKENS = 512
"""The block cap on the CPU backend: there the fp32 logits of a block pair should stay in cache.
With 512-token blocks the 8-device CPU ring was 0.80x the time of 1024-token blocks at 16K tokens
(`benchmarks/attention_cpu.py`, 2026-11-26); GPUs keep the larger MAX_BLOCK_TOKENS."""


def max_block_tokens() -> int:
    """The largest block a default chunking cuts: CPU_BLOCK_TOKENS on CPU, else MAX_BLOCK_TOKENS."""
    return CPU_BLOCK_TOKENS if jax.default_backend() == "cpu" else MAX_BLOCK_TOKENS


def default_chunk(tokens: int) -> int:
    """The largest divisor of `tokens` not above `max_block_tokens()`."""
    return next(c for c in range(min(tokens, max_block_tokens()), 0, -1) if tokens % c == 0)


def _chunk_count(tokens, chunk_tokens):
    if chunk_tokens is None:
        chunk_tokens = default_chunk(tokens)
    if chunk_tokens >= tokens:
        return 1
    if tokens % chunk_tokens:
        raise ValueError(f"chunk_tokens={chunk_tokens} must divide the {tokens} local tokens")
    return tokens // chunk_tokens


def _relation(q: Span, k: Span):
    """SKIP (no query sees any key: all keys in the future, or in other documents), FULL (every
    query sees every key: no mask needed) or MASKED, for one chunk pair. Decided from the chunks'
    position and document-id ranges (per sequence of the batch), so a skip is never wrong."""
    if not q.masked:
        return FULL
    skip, full = jnp.bool_(False), jnp.bool_(True)
    if q.pos is not None:
        skip = q.pos.max() < k.pos.min()
        full = q.pos.min() >= k.pos.max()
    if q.seg is not None:
        q_lo, q_hi, k_lo, k_hi = q.seg.min(1), q.seg.max(1), k.seg.min(1), k.seg.max(1)
        skip = skip | jnp.all((k_hi < q_lo) | (k_lo > q_hi))
        full = full & jnp.all((q_lo == q_hi) & (k_lo == k_hi) & (q_lo == k_lo))
    return jnp.where(skip, SKIP, jnp.where(full, FULL, MASKED))


def _pair_forward(q, k, v, q_span: Span, k_span: Span, scale):
    if not q_span.masked:
        return block_forward(q, k, v, scale=scale)
    empty = (jnp.zeros(q.shape, F32), jnp.full(q.shape[:3], -jnp.inf, F32))
    return lax.switch(
        _relation(q_span, k_span),
        [
            lambda: empty,
            lambda: block_forward(q, k, v, scale=scale),
            lambda: block_forward(q, k, v, q_span.pos, k_span.pos, scale=scale, q_seg=q_span.seg, k_seg=k_span.seg),
        ],
    )


def _pair_backward(q, k, v, do, lse, delta, q_span: Span, k_span: Span, scale):
    if not q_span.masked:
        return block_backward(q, k, v, do, lse, delta, scale=scale)
    zeros = (jnp.zeros(q.shape, F32), jnp.zeros(k.shape, F32), jnp.zeros(v.shape, F32))
    return lax.switch(
        _relation(q_span, k_span),
        [
            lambda: zeros,
            lambda: block_backward(q, k, v, do, lse, delta, scale=scale),
            lambda: block_backward(
                q, k, v, do, lse, delta, q_span.pos, k_span.pos, scale=scale, q_seg=q_span.seg, k_seg=k_span.seg
            ),
        ],
    )


def _tied(q, q_span: Span, k_span: Span):
    """q and the spans through one optimization barrier, so the masks computed from the spans
    depend on q. Positions are constants: under a scan over layers, JAX hoisted the masks (and the
    logits-sized selects built on them) of every chunk pair out of the loop and kept them all at
    once (3.9 GiB instead of 0.5 at 8K tokens; 128 GiB at 32K on an H200)."""
    return lax.optimization_barrier((q, q_span, k_span))


def split_kv(k, v, chunk_tokens, on_host):
    """K and V as [chunks, b, chunk, kv_heads, d] stacks, in host memory when `on_host`.

    Callers that keep K/V for the backward keep these stacks, so offloaded K/V never return to
    device memory whole."""
    chunks = _chunk_count(k.shape[1], chunk_tokens)
    return to_host(_split(k, chunks), on_host), to_host(_split(v, chunks), on_host)


class _KVChunks:
    """Chunk stacks from `split_kv`; `fetch(j)` brings chunk j to device memory."""

    def __init__(self, k_chunks, v_chunks, k_span: Span, on_host):
        self.k, self.v, self.on_host = k_chunks, v_chunks, on_host
        self.count = k_chunks.shape[0]
        self.span = k_span.chunks(self.count)

    def fetch(self, j):
        j = jnp.minimum(j, self.count - 1)  # the prefetch past the last chunk re-reads it

        def take(x):
            return to_device(lax.dynamic_index_in_dim(x, j, keepdims=False), self.on_host)

        return take(self.k), take(self.v)

    def span_of(self, j):
        return jax.tree.map(lambda x: x[j], self.span)


def chunked_forward(q, k_chunks, v_chunks, q_span: Span, k_span: Span, *, scale, chunk_tokens=None, kv_on_host=False):
    """(out fp32, lse fp32) of local queries `q` over K/V given as `split_kv` stacks; the spans
    give the tokens' positions and documents (Span() = every key visible)."""
    q, q_span, k_span = _tied(q, q_span, k_span)
    q_chunks = _chunk_count(q.shape[1], chunk_tokens)
    kv = _KVChunks(k_chunks, v_chunks, k_span, kv_on_host)
    if q_chunks == 1 and kv.count == 1 and not kv_on_host:
        return _pair_forward(q, k_chunks[0], v_chunks[0], q_span, k_span, scale)

    def one_query_chunk(_, xs):
        q_c, q_span_c = xs

        def one_kv_chunk(carry, j):
            out, lse, k_c, v_c = carry
            k_next, v_next = kv.fetch(j + 1)
            out, lse = merge_partials(out, lse, *_pair_forward(q_c, k_c, v_c, q_span_c, kv.span_of(j), scale))
            return (out, lse, k_next, v_next), None

        init = (jnp.zeros(q_c.shape, F32), jnp.full(q_c.shape[:3], -jnp.inf, F32), *kv.fetch(0))
        (out, lse, _, _), _ = lax.scan(one_kv_chunk, init, jnp.arange(kv.count))
        return None, (out, lse)

    _, (out, lse) = lax.scan(one_query_chunk, None, (_split(q, q_chunks), q_span.chunks(q_chunks)))
    return _join(out), _join(lse)


def chunked_backward(
    q, k_chunks, v_chunks, do, lse, delta, q_span: Span, k_span: Span, *, scale, chunk_tokens=None, kv_on_host=False
):
    """(dq, dk, dv) in fp32, dk/dv in natural [b, s, ...] layout; loops over K/V chunks (fetched
    ahead) outside, query chunks inside."""
    q, q_span, k_span = _tied(q, q_span, k_span)
    q_chunks = _chunk_count(q.shape[1], chunk_tokens)
    kv = _KVChunks(k_chunks, v_chunks, k_span, kv_on_host)
    if q_chunks == 1 and kv.count == 1 and not kv_on_host:
        dq, dk, dv = _pair_backward(q, k_chunks[0], v_chunks[0], do, lse, delta, q_span, k_span, scale)
        return dq, dk, dv

    query_side = tuple(_split(x, q_chunks) for x in (q, do, lse, delta))
    q_span_chunks = q_span.chunks(q_chunks)

    def one_kv_chunk(carry, j):
        dq, k_c, v_c = carry
        k_next, v_next = kv.fetch(j + 1)
        k_span_c = kv.span_of(j)

        def one_query_chunk(dkv, xs):
            (q_c, do_c, lse_c, delta_c), q_span_c = xs
            dq_c, dk_c, dv_c = _pair_backward(q_c, k_c, v_c, do_c, lse_c, delta_c, q_span_c, k_span_c, scale)
            return (dkv[0] + dk_c, dkv[1] + dv_c), dq_c

        zeros = (jnp.zeros(k_c.shape, F32), jnp.zeros(v_c.shape, F32))
        (dk_c, dv_c), dq_parts = lax.scan(one_query_chunk, zeros, (query_side, q_span_chunks))
        return (dq + dq_parts, k_next, v_next), (dk_c, dv_c)

    init = (jnp.zeros((q_chunks,) + query_side[0].shape[1:], F32), *kv.fetch(0))
    (dq, _, _), (dk, dv) = lax.scan(one_kv_chunk, init, jnp.arange(kv.count))
    return _join(dq), _join(dk), _join(dv)
