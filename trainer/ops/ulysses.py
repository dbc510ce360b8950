"""Ulysses (DeepSpeed-Ulysses) context parallelism, alone or inside a ring (hybrid, USP-style).

Each device holds 1/C of the sequence for all of its (tensor-local) heads. An all-to-all over the
context axis turns that into the whole sequence for 1/C of the heads; attention runs locally on it
(all_gather.py's local attention: one fused call where the layout is unpermuted, else the
chunked kernel, so FPDT chunking and host offload apply unchanged), and a
second all-to-all returns the output to the sequence layout. Per layer that is three all-to-alls of
q/k/v and one of the output, each moving (C-1)/C of a device's shard, against the ring's C-1
passes of K/V; every device sees every position, so the causal work is balanced whatever the
token layout. The degree is bounded by the heads: see `ulysses_kv_repeat` for the GQA rule.

Hybrid (`ring` > 1): the context axis factors into `ring` groups of U = C / ring consecutive
devices. The all-to-alls run inside each group (NVLink when a group stays in a node), giving each
device its group's U shards (contiguous in layout order) for 1/U of the heads, and ring attention
(ring.py) runs over the groups: device i passes its K/V to device i + U. Causal load balancing
carries over: with dual-chunk-swap a group holds U early and U late chunks, so every ring member
still has one early and one late piece. The heads bound is on U only.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from ..contract.config import ulysses_kv_repeat
from .all_gather import in_natural_order, make_local_attention
from .chunked import LocalAttention, Span
from .ring import make_ring_attention


def make_ulysses_attention(
    *,
    axis: str,
    axis_size: int,
    positions,
    scale: float,
    chunk_tokens,
    offload: bool,
    heads: int,
    kv_heads: int,
    ring: int = 1,
) -> LocalAttention:
    """Per-device attention for use inside shard_map over `axis` (of `axis_size` devices);
    `ring` > 1 makes it the hybrid of Ulysses groups of axis_size // ring devices and a ring of them.

    `positions`: the true position of every token of the sequence in layout order (None: not
    causal); `heads`, `kv_heads`: one device's (one tensor rank's) query and K/V heads."""
    degree = axis_size // ring
    repeat = ulysses_kv_repeat(heads, kv_heads, degree)
    groups = None if ring == 1 else [list(range(g * degree, (g + 1) * degree)) for g in range(ring)]
    if ring == 1:  # the device holds the whole sequence: its positions serve q and k alike
        local_forward, inner_bwd = make_local_attention(
            scale=scale, chunk_tokens=chunk_tokens, offload=offload, same_tokens=in_natural_order(positions)
        )

        def inner_fwd(q, k, v, segments):
            pos = None if positions is None else jnp.asarray(positions)  # made here: a constant of this trace
            return local_forward(q, k, v, Span(pos, segments), Span(pos, segments))

    else:
        inner_fwd, inner_bwd = make_ring_attention(
            axis=axis,
            axis_size=axis_size,
            positions=positions,
            scale=scale,
            chunk_tokens=chunk_tokens,
            offload=offload,
            group=degree,
        )

    def to_heads(x):  # [batch, seq/C, heads, dim] -> [batch, U*seq/C, heads/U, dim]
        return lax.all_to_all(x, axis, split_axis=2, concat_axis=1, tiled=True, axis_index_groups=groups)

    def to_sequence(x):  # [batch, U*seq/C, heads/U, dim] -> [batch, seq/C, heads, dim]
        return lax.all_to_all(x, axis, split_axis=1, concat_axis=2, tiled=True, axis_index_groups=groups)

    def group_segments(segments):  # [batch, seq/C] -> [batch, U*seq/C]: the document ids to_heads' tokens have
        if segments is None:
            return None
        return lax.all_gather(segments, axis, axis=1, tiled=True, axis_index_groups=groups)

    def fwd(q, k, v, segments):
        if repeat > 1:  # copy j of K/V head i becomes head i * repeat + j: device d gets head d // repeat
            k, v = (jnp.repeat(x, repeat, axis=2) for x in (k, v))
        out, residuals = inner_fwd(to_heads(q), to_heads(k), to_heads(v), group_segments(segments))
        return to_sequence(out), residuals

    def bwd(residuals, do):
        dq, dk, dv = (to_sequence(x) for x in inner_bwd(residuals, to_heads(do)))
        if repeat > 1:  # the copies' gradients add up in the head they copied
            dk, dv = (x.reshape(*x.shape[:2], -1, repeat, x.shape[-1]).sum(3) for x in (dk, dv))
        return dq, dk, dv

    return LocalAttention(fwd, bwd)
