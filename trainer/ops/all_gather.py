"""All-gather context parallelism: gather the full K/V over "context", attend the local queries.

Simpler than the ring and with fewer, larger messages, but every device holds the whole
sequence's K/V. The gather is differentiated by JAX (its transpose is a reduce-scatter of dK/dV);
the local attention is a custom VJP over the chunked kernel, so with `offload` the gathered K/V
wait in host memory and are fetched chunk by chunk (FPDT), and the residuals live on the host.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import custom_vjp, lax

from .chunked import Span, chunked_backward, chunked_forward, split_kv
from .offload import to_device, to_host


def make_local_attention(*, scale: float, chunk_tokens, offload: bool):
    """f(q, k, v, q_span, k_span) -> out over local arrays; `Span`s give the tokens' positions
    (causal mask) and document ids (document mask), Span() for neither.

    With `offload`, the K/V chunk stacks go to host memory once in the forward and the backward
    reuses them there: the full K/V never return to device memory whole."""

    def forward(q, k_chunks, v_chunks, q_span, k_span):
        out, lse = chunked_forward(
            q, k_chunks, v_chunks, q_span, k_span, scale=scale, chunk_tokens=chunk_tokens, kv_on_host=offload
        )
        return out.astype(q.dtype), lse

    @custom_vjp
    def local_attention(q, k, v, q_span, k_span):
        return forward(q, *split_kv(k, v, chunk_tokens, offload), q_span, k_span)[0]

    def local_fwd(q, k, v, q_span, k_span):
        k_chunks, v_chunks = split_kv(k, v, chunk_tokens, offload)
        out, lse = forward(q, k_chunks, v_chunks, q_span, k_span)
        saved = (*(to_host(x, offload) for x in (q, out, lse)), k_chunks, v_chunks)
        return out, (saved, q_span, k_span)

    def local_bwd(residuals, do):
        (q, out, lse, k_chunks, v_chunks), q_span, k_span = residuals
        q, out, lse = (to_device(x, offload) for x in (q, out, lse))
        delta = jnp.sum(do.astype(jnp.float32) * out.astype(jnp.float32), axis=-1)
        dq, dk, dv = chunked_backward(
            q,
            k_chunks,
            v_chunks,
            do,
            lse,
            delta,
            q_span,
            k_span,
            scale=scale,
            chunk_tokens=chunk_tokens,
            kv_on_host=offload,
        )
        return dq.astype(q.dtype), dk.astype(k_chunks.dtype), dv.astype(v_chunks.dtype), None, None

    local_attention.defvjp(local_fwd, local_bwd)
    return local_attention


def make_all_gather_attention(*, axis: str, positions, scale: float, chunk_tokens, offload: bool):
    """Per-device f(q, k, v, segments) -> out for use inside shard_map over `axis` (segments: the
    local tokens' document ids [b, t], or None)."""
    local_attention = make_local_attention(scale=scale, chunk_tokens=chunk_tokens, offload=offload)

    def all_gather_attention(q, k, v, segments):
        k_all, v_all = (lax.all_gather(x, axis, axis=1, tiled=True) for x in (k, v))
        k_seg = None if segments is None else lax.all_gather(segments, axis, axis=1, tiled=True)
        if positions is None:
            return local_attention(q, k_all, v_all, Span(None, segments), Span(None, k_seg))
        k_pos = jnp.asarray(positions)
        q_pos = lax.dynamic_slice_in_dim(k_pos, lax.axis_index(axis) * q.shape[1], q.shape[1])
        return local_attention(q, k_all, v_all, Span(q_pos, segments), Span(k_pos, k_seg))

    return all_gather_attention
