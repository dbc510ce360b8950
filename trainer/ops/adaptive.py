"""Attention in an adaptive context-parallel layout (trainer/adaptive_cp.py): a ring over the
devices' ring parts and, beside it, a local attention over each device's local part.

Each device's shard is [ring part: `ring` tokens | local part: `local` tokens]. The ring part's
queries attend over every device's ring part (ops/ring.py, dual-chunk-swap over the ring
stream); the local part's queries attend over their own local part only (ops/chunked.py, masked
by slot order: documents there are whole and in order). Nothing of a local part is ever sent.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..contract.load_balance import permutation
from ..mesh import CONTEXT
from .all_gather import make_local_attention
from .attention import _sharded, _within_layout_chunks
from .chunked import LocalAttention, Span
from .ring import make_ring_attention


def make_adaptive_attention(*, context: int, ring: int, local: int, scale: float) -> LocalAttention:
    """Per-device causal attention over a shard of `ring` + `local` tokens (segments required)."""
    ring_attention = None
    if ring:
        ring_attention = make_ring_attention(
            axis=CONTEXT,
            axis_size=context,
            positions=permutation(context * ring, context, "dual_chunk_swap").astype(np.int32),
            scale=scale,
            chunk_tokens=_within_layout_chunks(ring, None) if context > 1 else None,
            offload=False,
            dual_chunk_swap=True,
        )
    local_forward, local_backward = make_local_attention(scale=scale, chunk_tokens=None, offload=False)
    local_positions = np.arange(local, dtype=np.int32)

    def fwd(q, k, v, segments):
        outs, saved = [], {}
        if ring:
            out, saved["ring"] = ring_attention.fwd(q[:, :ring], k[:, :ring], v[:, :ring], segments[:, :ring])
            outs.append(out)
        if local:
            span = Span(jnp.asarray(local_positions), segments[:, ring:])
            out, saved["local"] = local_forward(q[:, ring:], k[:, ring:], v[:, ring:], span, span)
            outs.append(out)
        return jnp.concatenate(outs, axis=1), saved

    def bwd(saved, do):
        grads = []
        if ring:
            grads.append(ring_attention.bwd(saved["ring"], do[:, :ring]))
        if local:
            grads.append(local_backward(saved["local"], do[:, ring:]))
        return tuple(jnp.concatenate(parts, axis=1) for parts in zip(*grads, strict=True))

    return LocalAttention(fwd, bwd)


def adaptive_attention(q, k, v, segments, *, mesh, ring: int, local: int):
    """Causal attention of q [batch, C x (ring + local), heads, d] (k/v: kv_heads) in an adaptive
    layout, sharded P(data, context, tensor, None), document ids `segments` [batch, seq]."""
    context = mesh.shape[CONTEXT]
    if q.shape[1] != context * (ring + local):
        raise ValueError(f"sequence of {q.shape[1]} tokens is not {context} x ({ring} + {local})")
    local_attention = make_adaptive_attention(context=context, ring=ring, local=local, scale=float(q.shape[-1]) ** -0.5)
    return _sharded(local_attention, mesh)(q, k, v, segments)
