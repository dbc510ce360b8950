"""Ring attention: exact context-parallel attention with K/V rotating around the "context" axis.

Runs per device inside `jax.shard_map`. Forward: C steps; at each step the device attends its
query shard to the K/V shard it currently holds while `lax.ppermute` already sends that shard on
to the next device; partial results merge by online softmax in fp32.

Backward (nothing per-step is saved): K/V rotate again, and the dK/dV accumulators
(fp32) travel with them, each device adding the contribution of its queries; after the last step
one more shift brings every accumulator home to the device that owns that K/V shard. dQ stays put.
Residuals are the local q, k, v, out and lse only (in host memory when offloading).
With packed documents the K/V shard's document ids travel with it, a few bytes per token.

Causal attention in the dual-chunk-swap layout (one document per sequence) runs as Transformer
Engine's ring does, one block-kernel call per step and no masked pairs (`_DualChunkRing`):
device r holds chunks r and 2C-1-r of 2C, so step 0 is one causal call over the local shard; a
K/V shard from an earlier ring member s < r is wholly visible in its first half (chunk s) and
wholly future in its second, so all queries attend its first half unmasked; from a later member
only the local second-half queries (chunk 2C-1-r) see anything, and they see all of it. Every
step after the first is then half a shard's work. The kernel is cuDNN on CUDA, the pure-JAX
chunked kernel elsewhere (ops/block_kernel.py). Other layouts, packed documents and hybrid rings
take the general path below, chunk pair by chunk pair with the masks and skips of ops/chunked.py.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .block import F32, merge_partials
from .block_kernel import BlockKernel, kernel_for
from .chunked import LocalAttention, Span, chunked_backward, chunked_forward, split_kv
from .loops import scan
from .offload import to_device, to_host


def make_ring_attention(
    *,
    axis: str,
    axis_size: int,
    positions,
    scale: float,
    chunk_tokens,
    offload: bool,
    group: int = 1,
    dual_chunk_swap: bool = False,
) -> LocalAttention:
    """Per-device ring attention for use inside shard_map over `axis`;
    `segments` [b, t]: the local tokens' document ids, or None (one document per sequence).

    `positions` (numpy [seq], layout order) gives true token positions for the causal mask;
    None for non-causal attention. `group` consecutive devices of the axis form one ring member
    (hybrid attention: each member is a Ulysses group holding its devices' shards for some heads);
    the ring runs over the axis_size // group members, device i passing to device i + group.
    `dual_chunk_swap`: the tokens are causal in the dual-chunk-swap layout; without documents and
    groups, the ring then runs `_DualChunkRing`.
    """
    members = axis_size // group
    shift = [(i, (i + group) % axis_size) for i in range(axis_size)]

    def rotate(*xs):
        return tuple(lax.ppermute(x, axis, shift) for x in xs)

    def shard_positions(source, tokens):
        if positions is None:
            return None
        return lax.dynamic_slice_in_dim(jnp.asarray(positions), source * tokens, tokens)

    def held_positions(step, tokens):
        """Positions of the K/V shard a device holds at `step`: it came from `step` devices back."""
        source = (lax.axis_index(axis) // group - step) % members
        return shard_positions(source, tokens)

    def forward(q, k, v, segments):
        tokens = q.shape[1]
        q_span = Span(held_positions(0, tokens), segments)

        def attend(out, lse, k, v, k_seg, step):
            return merge_partials(
                out,
                lse,
                *chunked_forward(
                    q,
                    *split_kv(k, v, chunk_tokens, on_host=False),
                    q_span,
                    Span(held_positions(step, tokens), k_seg),
                    scale=scale,
                    chunk_tokens=chunk_tokens,
                ),
            )

        def step_and_pass(carry, step):
            out, lse, k, v, k_seg = carry
            passed = rotate(k, v, *([] if k_seg is None else [k_seg]))
            k_seg_next = None if k_seg is None else passed[2]
            return (*attend(out, lse, k, v, k_seg, step), *passed[:2], k_seg_next), None

        init = (jnp.zeros(q.shape, F32), jnp.full(q.shape[:3], -jnp.inf, F32), k, v, segments)
        (out, lse, k_last, v_last, k_seg), _ = scan(step_and_pass, init, jnp.arange(members - 1))
        out, lse = attend(out, lse, k_last, v_last, k_seg, members - 1)
        return out.astype(q.dtype), lse

    def backward(q, k, v, segments, out, lse, do):
        tokens = q.shape[1]
        q_span = Span(held_positions(0, tokens), segments)
        delta = jnp.sum(do.astype(F32) * out.astype(F32), axis=-1)

        def grads(k, v, k_seg, step):
            return chunked_backward(
                q,
                *split_kv(k, v, chunk_tokens, on_host=False),
                do,
                lse,
                delta,
                q_span,
                Span(held_positions(step, tokens), k_seg),
                scale=scale,
                chunk_tokens=chunk_tokens,
            )

        def step_and_pass(carry, step):
            dq, k, v, k_seg, dk, dv = carry
            dq_s, dk_s, dv_s = grads(k, v, k_seg, step)
            k_seg_next = None if k_seg is None else rotate(k_seg)[0]
            k_next, v_next, dk, dv = rotate(k, v, dk + dk_s, dv + dv_s)
            return (dq + dq_s, k_next, v_next, k_seg_next, dk, dv), None

        def zeros(x):
            return jnp.zeros(x.shape, F32)

        init = (zeros(q), k, v, segments, zeros(k), zeros(v))
        (dq, k, v, k_seg, dk, dv), _ = scan(step_and_pass, init, jnp.arange(members - 1))
        dq_s, dk_s, dv_s = grads(k, v, k_seg, members - 1)
        dk, dv = dk + dk_s, dv + dv_s
        if members > 1:
            dk, dv = rotate(dk, dv)  # home: the owner of this K/V shard is one step ahead
        return dq + dq_s, dk, dv

    def whole_steps(segments):
        return dual_chunk_swap and group == 1 and segments is None

    def dual_chunk_ring(q):
        return _DualChunkRing(q, rotate, axis, members, kernel_for(q, scale=scale, chunk_tokens=chunk_tokens))

    def fwd(q, k, v, segments):
        if whole_steps(segments):
            out, lse = dual_chunk_ring(q).forward(k, v)
        else:
            out, lse = forward(q, k, v, segments)
        return out, (tuple(to_host(x, offload) for x in (q, k, v, out, lse)), segments)

    def bwd(residuals, do):
        saved, segments = residuals
        q, k, v, out, lse = (to_device(x, offload) for x in saved)
        if whole_steps(segments):
            return dual_chunk_ring(q).backward(k, v, out, lse, do)
        return backward(q, k, v, segments, out, lse, do)

    return LocalAttention(fwd, bwd)


class _DualChunkRing:
    """The dual-chunk-swap ring over one device's queries q [b, 2h, heads, d] (module docstring)."""

    def __init__(self, q, rotate, axis, members, kernel: BlockKernel):
        self.q, self.rotate, self.kernel, self.members = q, rotate, kernel, members
        self.half = q.shape[1] // 2
        self.me = lax.axis_index(axis)

    def from_earlier(self, step):
        """Whether the K/V shard held at `step` (> 0) came from an earlier ring member."""
        return (self.me - step) % self.members < self.me

    def forward(self, k, v):
        q, h, kernel = self.q, self.half, self.kernel

        def attend(out, lse, k, v, step):
            def earlier():  # every query, the first half of K/V
                return merge_partials(out, lse, *kernel.forward(q, k[:, :h], v[:, :h], False))

            def later():  # the second half of the queries, all of K/V
                late = merge_partials(out[:, h:], lse[:, h:], *kernel.forward(q[:, h:], k, v, False))
                return tuple(jnp.concatenate([x[:, :h], y], axis=1) for x, y in zip((out, lse), late, strict=True))

            return lax.cond(self.from_earlier(step), earlier, later)

        def step_and_pass(carry, step):
            out, lse, k, v = carry
            passed = self.rotate(k, v)
            return (*attend(out, lse, k, v, step), *passed), None

        passed = self.rotate(k, v)
        out, lse = kernel.forward(q, k, v, True)  # step 0: the local shard, causally
        steps = jnp.arange(1, self.members - 1)
        (out, lse, k, v), _ = scan(step_and_pass, (out, lse, *passed), steps)
        out, lse = attend(out, lse, k, v, self.members - 1)
        return out.astype(q.dtype), lse

    def backward(self, k, v, out, lse, do):
        q, h, kernel = self.q, self.half, self.kernel

        def grads(k, v, step):
            def earlier():
                dq, dk, dv = kernel.backward(q, k[:, :h], v[:, :h], out, lse, do, False)
                return dq, *(jnp.concatenate([d, jnp.zeros_like(d)], axis=1) for d in (dk, dv))

            def later():
                dq, dk, dv = kernel.backward(q[:, h:], k, v, out[:, h:], lse[:, h:], do[:, h:], False)
                return jnp.concatenate([jnp.zeros_like(dq), dq], axis=1), dk, dv

            return lax.cond(self.from_earlier(step), earlier, later)

        def step_and_pass(carry, step):
            dq, k, v, dk, dv = carry
            dq_s, dk_s, dv_s = grads(k, v, step)
            return (dq + dq_s, *self.rotate(k, v, dk + dk_s, dv + dv_s)), None

        dq, dk, dv = kernel.backward(q, k, v, out, lse, do, True)  # step 0
        carry = (dq, *self.rotate(k, v, dk, dv))
        (dq, k, v, dk, dv), _ = scan(step_and_pass, carry, jnp.arange(1, self.members - 1))
        dq_s, dk_s, dv_s = grads(k, v, self.members - 1)
        dk, dv = self.rotate(dk + dk_s, dv + dv_s)  # home: the owner of this K/V shard is one step ahead
        return dq + dq_s, dk, dv
