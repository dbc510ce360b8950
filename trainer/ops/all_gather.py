"""All-gather context parallelism: gather the full K/V over "context", attend the local queries.

Simpler than the ring and with fewer, larger messages, but every device holds the whole
sequence's K/V. The backward reduce-scatters dK/dV (fp32) back to their owners. The local
attention is the chunked kernel, so with `offload` the gathered K/V wait in host memory and are
fetched chunk by chunk (FPDT), and the residuals live on the host.

Where the queries are the keys' own tokens in natural order (context 1, or one device's heads
after Ulysses' all-to-all, with an unpermuted layout), no documents and no offload, the attention
is one block-kernel call (ops/block_kernel.py): cuDNN's fused attention, causal by index, forward
and backward, on CUDA; the chunked kernel elsewhere.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .block import F32
from .block_kernel import kernel_for
from .chunked import LocalAttention, Span, chunked_backward, chunked_forward, split_kv
from .offload import to_device, to_host


class WholeResiduals(NamedTuple):
    """What the backward of one block-kernel call over all the tokens keeps."""

    q: jax.Array
    k: jax.Array
    v: jax.Array
    out: jax.Array
    lse: jax.Array


def in_natural_order(positions) -> bool:
    """Whether a layout's `positions` (numpy, None when not causal) are the tokens' own order."""
    return positions is None or np.array_equal(positions, np.arange(positions.size))


def make_local_attention(*, scale: float, chunk_tokens, offload: bool, same_tokens: bool = False):
    """(forward, backward) over local arrays: forward(q, k, v, q_span, k_span) -> (out,
    residuals), backward(residuals, do) -> (dq, dk, dv) fp32; `Span`s give the tokens' positions
    (causal mask) and document ids (document mask), Span() for neither.

    With `offload`, the K/V chunk stacks go to host memory once in the forward and the backward
    reuses them there: the full K/V never return to device memory whole. `same_tokens`: q and k/v
    are the same tokens, positions (if any) their indices; without documents or offload the
    attention is then one block-kernel call (module docstring)."""
    kernel = partial(kernel_for, scale=scale, chunk_tokens=chunk_tokens)

    def forward(q, k, v, q_span, k_span):
        if same_tokens and not offload and q_span.seg is None:
            out, lse = kernel(q).forward(q, k, v, q_span.pos is not None)
            out = out.astype(q.dtype)
            return out, (WholeResiduals(q, k, v, out, lse), q_span, k_span)
        k_chunks, v_chunks = split_kv(k, v, chunk_tokens, offload)
        out, lse = chunked_forward(
            q, k_chunks, v_chunks, q_span, k_span, scale=scale, chunk_tokens=chunk_tokens, kv_on_host=offload
        )
        out = out.astype(q.dtype)
        saved = (*(to_host(x, offload) for x in (q, out, lse)), k_chunks, v_chunks)
        return out, (saved, q_span, k_span)

    def backward(residuals, do):
        saved, q_span, k_span = residuals
        if isinstance(saved, WholeResiduals):
            return kernel(saved.q).backward(*saved, do, q_span.pos is not None)
        q, out, lse, k_chunks, v_chunks = saved
        q, out, lse = (to_device(x, offload) for x in (q, out, lse))
        delta = jnp.sum(do.astype(F32) * out.astype(F32), axis=-1)
        return chunked_backward(
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

    return forward, backward


def make_all_gather_attention(
    *, axis: str, axis_size: int, positions, scale: float, chunk_tokens, offload: bool
) -> LocalAttention:
    """Per-device attention for use inside shard_map over `axis` of `axis_size` devices (segments:
    the local tokens' document ids [b, t], or None)."""
    whole = axis_size == 1 and in_natural_order(positions)  # every device holds every token
    local_forward, local_backward = make_local_attention(
        scale=scale, chunk_tokens=chunk_tokens, offload=offload, same_tokens=whole
    )

    def gather(x):
        return None if x is None else lax.all_gather(x, axis, axis=1, tiled=True)

    def fwd(q, k, v, segments):
        k_all, v_all, k_seg = gather(k), gather(v), gather(segments)
        if positions is None:
            return local_forward(q, k_all, v_all, Span(None, segments), Span(None, k_seg))
        k_pos = jnp.asarray(positions)
        q_pos = lax.dynamic_slice_in_dim(k_pos, lax.axis_index(axis) * q.shape[1], q.shape[1])
        return local_forward(q, k_all, v_all, Span(q_pos, segments), Span(k_pos, k_seg))

    def bwd(residuals, do):
        dq, dk_all, dv_all = local_backward(residuals, do)
        dk, dv = (lax.psum_scatter(x, axis, scatter_dimension=1, tiled=True) for x in (dk_all, dv_all))
        return dq, dk, dv

    return LocalAttention(fwd, bwd)
