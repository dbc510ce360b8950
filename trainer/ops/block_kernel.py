"""The attention kernel of one (queries, K/V shard) pair, as the ring calls it.

    forward(q, k, v, causal)              -> (out fp32 [b, t, heads, d], lse fp32 [b, t, heads])
    backward(q, k, v, out, lse, do, causal) -> (dq, dk, dv) fp32

`causal` masks by index within the call (query i sees keys j <= i, t == s); otherwise every key
is visible. The backward takes the *final* output and log-sum-exp over the whole key range (the
flash-attention backward), so a ring runs it once per shard without redoing the forward.

Two implementations: the pure-JAX chunked kernel (ops/chunked.py: the CPU path and the
reference; chunk pairs in the causal call's future are skipped) and cuDNN's fused flash
attention (ops/cudnn_compat.py). `block_kernel` picks cuDNN where the program is lowered for
CUDA and the inputs suit it, per platform at lowering time (`lax.platform_dependent`), so one
traced program runs the JAX kernel on a CPU and cuDNN on an NVIDIA GPU, and a CPU can lower the
CUDA program to check it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from . import cudnn_compat
from .block import F32, cudnn_unsuitable
from .chunked import Span, chunked_backward, chunked_forward, split_kv


class BlockKernel(NamedTuple):
    forward: Callable
    backward: Callable


def _spans(q, k, causal):
    if not causal:
        return Span(), Span()
    return Span(jnp.arange(q.shape[1])), Span(jnp.arange(k.shape[1]))


def jax_kernel(*, scale: float, chunk_tokens=None) -> BlockKernel:
    """The pure-JAX kernel, in chunks of `chunk_tokens` (None: ops/chunked.py's default blocks)."""

    def forward(q, k, v, causal):
        return chunked_forward(
            q,
            *split_kv(k, v, chunk_tokens, on_host=False),
            *_spans(q, k, causal),
            scale=scale,
            chunk_tokens=chunk_tokens,
        )

    def backward(q, k, v, out, lse, do, causal):
        delta = jnp.sum(do.astype(F32) * out.astype(F32), axis=-1)
        return chunked_backward(
            q,
            *split_kv(k, v, chunk_tokens, on_host=False),
            do,
            lse,
            delta,
            *_spans(q, k, causal),
            scale=scale,
            chunk_tokens=chunk_tokens,
        )

    return BlockKernel(forward, backward)


def cudnn_kernel(*, scale: float) -> BlockKernel:
    """cuDNN flash attention (bf16/fp16 inputs); outputs widened to fp32 like the JAX kernel's."""

    def forward(q, k, v, causal):
        out, lse = cudnn_compat.flash_forward(q, k, v, scale=scale, causal=causal)
        return out.astype(F32), lse

    def backward(q, k, v, out, lse, do, causal):
        grads = cudnn_compat.flash_backward(
            q, k, v, out.astype(q.dtype), lse, do.astype(q.dtype), scale=scale, causal=causal
        )
        return tuple(g.astype(F32) for g in grads)

    return BlockKernel(forward, backward)


def block_kernel(dtype, head_dim: int, *, scale: float, chunk_tokens=None) -> BlockKernel:
    """cuDNN on CUDA when `dtype` and `head_dim` suit it, the JAX kernel everywhere else."""
    portable = jax_kernel(scale=scale, chunk_tokens=chunk_tokens)
    if cudnn_unsuitable(dtype, head_dim):
        return portable
    fused = cudnn_kernel(scale=scale)

    def forward(q, k, v, causal):
        return lax.platform_dependent(
            q, k, v, cuda=lambda *a: fused.forward(*a, causal), default=lambda *a: portable.forward(*a, causal)
        )

    def backward(q, k, v, out, lse, do, causal):
        return lax.platform_dependent(
            q,
            k,
            v,
            out,
            lse,
            do,
            cuda=lambda *a: fused.backward(*a, causal),
            default=lambda *a: portable.backward(*a, causal),
        )

    return BlockKernel(forward, backward)


def kernel_for(q, *, scale: float, chunk_tokens=None) -> BlockKernel:
    """The block kernel for queries like `q`: its dtype and head size decide the implementation."""
    return block_kernel(q.dtype, q.shape[-1], scale=scale, chunk_tokens=chunk_tokens)
