"""Ulysses (DeepSpeed-Ulysses) context parallelism: an all-to-all from sequence shards to head shards.

Each device holds 1/C of the sequence for all of its (tensor-local) heads. An all-to-all over the
context axis turns that into the whole sequence for 1/C of the heads; attention runs locally on it
(the chunked kernel of all_gather.py, so FPDT chunking and host offload apply unchanged), and a
second all-to-all returns the output to the sequence layout. Per layer that is three all-to-alls of
q/k/v and one of the output, each moving (C-1)/C of a device's shard, against the ring's C-1
passes of K/V; every device sees every position, so the causal work is balanced whatever the
token layout. The degree is bounded by the heads: see `ulysses_kv_repeat` for the GQA rule.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..config import ulysses_kv_repeat
from .all_gather import make_local_attention


def make_ulysses_attention(*, axis: str, axis_size: int, positions, scale: float, chunk_tokens, offload: bool):
    """Per-device f(q, k, v) -> out for use inside shard_map over `axis` (of `axis_size` devices).

    `positions`: the true position of every token of the sequence in layout order (None: not
    causal); after the all-to-all a device holds the whole sequence, so they serve q and k alike."""
    local_attention = make_local_attention(scale=scale, chunk_tokens=chunk_tokens, offload=offload)

    def to_heads(x):  # [batch, seq/C, heads, dim] -> [batch, seq, heads/C, dim]
        return lax.all_to_all(x, axis, split_axis=2, concat_axis=1, tiled=True)

    def to_sequence(x):  # [batch, seq, heads/C, dim] -> [batch, seq/C, heads, dim]
        return lax.all_to_all(x, axis, split_axis=1, concat_axis=2, tiled=True)

    def ulysses_attention(q, k, v):
        repeat = ulysses_kv_repeat(q.shape[2], k.shape[2], axis_size)
        if repeat > 1:  # copy j of K/V head i becomes head i * repeat + j: device d gets head d // repeat
            k, v = (jnp.repeat(x, repeat, axis=2) for x in (k, v))
        pos = None if positions is None else jnp.asarray(positions)
        return to_sequence(local_attention(to_heads(q), to_heads(k), to_heads(v), pos, pos))

    return ulysses_attention
