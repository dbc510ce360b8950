"""FPDT-style chunked attention of local queries against a K/V range, optionally host-offloaded.

Queries are processed one chunk of `chunk_tokens` at a time against one K/V chunk at a time, so
the temporaries are chunk x chunk logits instead of shard x shard. With `kv_on_host`, the K/V
chunks wait in host memory and each one is fetched while the previous chunk computes (the fetch
of chunk j+1 is issued in iteration j and carried into iteration j+1: double buffering).

Causal chunk pairs whose keys are all in the future of all queries are skipped (`lax.switch`
on a decision taken from the chunks' min/max positions); pairs whose keys are all in the past
run without a mask (cuDNN-eligible on GPU); the rest are masked by position.

These are the bodies of custom VJPs (ring, all-gather): they are run, never differentiated.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .block import F32, block_backward, block_forward, merge_partials
from .offload import to_device, to_host

SKIP, FULL, MASKED = 0, 1, 2


def _split(x, chunks):
    """[b, t, ...] -> [chunks, b, t / chunks, ...]."""
    b, t = x.shape[:2]
    return jnp.moveaxis(x.reshape(b, chunks, t // chunks, *x.shape[2:]), 1, 0)


def _join(x):
    """Inverse of `_split`."""
    return jnp.moveaxis(x, 0, 1).reshape(x.shape[1], -1, *x.shape[3:])


def _chunk_count(tokens, chunk_tokens):
    if chunk_tokens is None or chunk_tokens >= tokens:
        return 1
    if tokens % chunk_tokens:
        raise ValueError(f"chunk_tokens={chunk_tokens} must divide the {tokens} local tokens")
    return tokens // chunk_tokens


def _relation(q_pos, k_pos):
    """SKIP, FULL or MASKED for one causal chunk pair (non-causal pairs have no positions)."""
    if q_pos is None:
        return FULL
    future = q_pos.max() < k_pos.min()
    past = q_pos.min() >= k_pos.max()
    return jnp.where(future, SKIP, jnp.where(past, FULL, MASKED))


def _pair_forward(q, k, v, q_pos, k_pos, scale):
    if q_pos is None:
        return block_forward(q, k, v, scale=scale)
    empty = (jnp.zeros(q.shape, F32), jnp.full(q.shape[:3], -jnp.inf, F32))
    return lax.switch(
        _relation(q_pos, k_pos),
        [
            lambda: empty,
            lambda: block_forward(q, k, v, scale=scale),
            lambda: block_forward(q, k, v, q_pos, k_pos, scale=scale),
        ],
    )


def _pair_backward(q, k, v, do, lse, delta, q_pos, k_pos, scale):
    if q_pos is None:
        return block_backward(q, k, v, do, lse, delta, scale=scale)
    zeros = (jnp.zeros(q.shape, F32), jnp.zeros(k.shape, F32), jnp.zeros(v.shape, F32))
    return lax.switch(
        _relation(q_pos, k_pos),
        [
            lambda: zeros,
            lambda: block_backward(q, k, v, do, lse, delta, scale=scale),
            lambda: block_backward(q, k, v, do, lse, delta, q_pos, k_pos, scale=scale),
        ],
    )


def split_kv(k, v, chunk_tokens, on_host):
    """K and V as [chunks, b, chunk, kv_heads, d] stacks, in host memory when `on_host`.

    Callers that keep K/V for the backward keep these stacks, so offloaded K/V never return to
    device memory whole."""
    chunks = _chunk_count(k.shape[1], chunk_tokens)
    return to_host(_split(k, chunks), on_host), to_host(_split(v, chunks), on_host)


class _KVChunks:
    """Chunk stacks from `split_kv`; `fetch(j)` brings chunk j to device memory."""

    def __init__(self, k_chunks, v_chunks, k_pos, on_host):
        self.k, self.v, self.on_host = k_chunks, v_chunks, on_host
        self.count = k_chunks.shape[0]
        self.pos = None if k_pos is None else k_pos.reshape(self.count, -1)

    def fetch(self, j):
        j = jnp.minimum(j, self.count - 1)  # the prefetch past the last chunk re-reads it

        def take(x):
            return to_device(lax.dynamic_index_in_dim(x, j, keepdims=False), self.on_host)

        return take(self.k), take(self.v)

    def positions(self, j):
        return None if self.pos is None else self.pos[j]


def chunked_forward(q, k_chunks, v_chunks, q_pos, k_pos, *, scale, chunk_tokens=None, kv_on_host=False):
    """(out fp32, lse fp32) of local queries `q` over K/V given as `split_kv` stacks;
    positions None = non-causal."""
    q_chunks = _chunk_count(q.shape[1], chunk_tokens)
    kv = _KVChunks(k_chunks, v_chunks, k_pos, kv_on_host)
    if q_chunks == 1 and kv.count == 1 and not kv_on_host:
        return _pair_forward(q, k_chunks[0], v_chunks[0], q_pos, k_pos, scale)

    def one_query_chunk(_, xs):
        q_c, q_pos_c = xs

        def one_kv_chunk(carry, j):
            out, lse, k_c, v_c = carry
            k_next, v_next = kv.fetch(j + 1)
            out, lse = merge_partials(out, lse, *_pair_forward(q_c, k_c, v_c, q_pos_c, kv.positions(j), scale))
            return (out, lse, k_next, v_next), None

        init = (jnp.zeros(q_c.shape, F32), jnp.full(q_c.shape[:3], -jnp.inf, F32), *kv.fetch(0))
        (out, lse, _, _), _ = lax.scan(one_kv_chunk, init, jnp.arange(kv.count))
        return None, (out, lse)

    q_pos_chunks = None if q_pos is None else q_pos.reshape(q_chunks, -1)
    _, (out, lse) = lax.scan(one_query_chunk, None, (_split(q, q_chunks), q_pos_chunks))
    return _join(out), _join(lse)


def chunked_backward(
    q, k_chunks, v_chunks, do, lse, delta, q_pos, k_pos, *, scale, chunk_tokens=None, kv_on_host=False
):
    """(dq, dk, dv) in fp32, dk/dv in natural [b, s, ...] layout; loops over K/V chunks (fetched
    ahead) outside, query chunks inside."""
    q_chunks = _chunk_count(q.shape[1], chunk_tokens)
    kv = _KVChunks(k_chunks, v_chunks, k_pos, kv_on_host)
    if q_chunks == 1 and kv.count == 1 and not kv_on_host:
        dq, dk, dv = _pair_backward(q, k_chunks[0], v_chunks[0], do, lse, delta, q_pos, k_pos, scale)
        return dq, dk, dv

    query_side = tuple(_split(x, q_chunks) for x in (q, do, lse, delta))
    q_pos_chunks = None if q_pos is None else q_pos.reshape(q_chunks, -1)

    def one_kv_chunk(carry, j):
        dq, k_c, v_c = carry
        k_next, v_next = kv.fetch(j + 1)
        k_pos_c = kv.positions(j)

        def one_query_chunk(dkv, xs):
            (q_c, do_c, lse_c, delta_c), q_pos_c = xs
            dq_c, dk_c, dv_c = _pair_backward(q_c, k_c, v_c, do_c, lse_c, delta_c, q_pos_c, k_pos_c, scale)
            return (dkv[0] + dk_c, dkv[1] + dv_c), dq_c

        zeros = (jnp.zeros(k_c.shape, F32), jnp.zeros(v_c.shape, F32))
        (dk_c, dv_c), dq_parts = lax.scan(one_query_chunk, zeros, (query_side, q_pos_chunks))
        return (dq + dq_parts, k_next, v_next), (dk_c, dv_c)

    init = (jnp.zeros((q_chunks,) + query_side[0].shape[1:], F32), *kv.fetch(0))
    (dq, _, _), (dk, dv) = lax.scan(one_kv_chunk, init, jnp.arange(kv.count))
    return _join(dq), _join(dk), _join(dv)
