"""Ring attention: exact context-parallel attention with K/V rotating around the "context" axis.

Runs per device inside `jax.shard_map`. Forward: C steps; at each step the device attends its
query shard to the K/V shard it currently holds while `lax.ppermute` already sends that shard on
to the next device; partial results merge by online softmax in fp32.

Backward (custom VJP, nothing per-step is saved): K/V rotate again, and the dK/dV accumulators
(fp32) travel with them, each device adding the contribution of its queries; after the last step
one more shift brings every accumulator home to the device that owns that K/V shard. dQ stays put.
Residuals are the local q, k, v, out and lse only (in host memory when offloading).
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import custom_vjp, lax

from .block import F32, merge_partials
from .chunked import chunked_backward, chunked_forward, split_kv
from .offload import to_device, to_host


def make_ring_attention(
    *, axis: str, axis_size: int, positions, scale: float, chunk_tokens, offload: bool, group: int = 1
):
    """Per-device ring attention f(q, k, v) -> out for use inside shard_map over `axis`.

    `positions` (numpy [seq], layout order) gives true token positions for the causal mask;
    None for non-causal attention. `group` consecutive devices of the axis form one ring member
    (hybrid attention: each member is a Ulysses group holding its devices' shards for some heads);
    the ring runs over the axis_size // group members, device i passing to device i + group.
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

    def forward(q, k, v):
        tokens = q.shape[1]
        q_pos = held_positions(0, tokens)

        def attend(out, lse, k, v, step):
            return merge_partials(
                out,
                lse,
                *chunked_forward(
                    q,
                    *split_kv(k, v, chunk_tokens, on_host=False),
                    q_pos,
                    held_positions(step, tokens),
                    scale=scale,
                    chunk_tokens=chunk_tokens,
                ),
            )

        def step_and_pass(carry, step):
            out, lse, k, v = carry
            k_next, v_next = rotate(k, v)
            return (*attend(out, lse, k, v, step), k_next, v_next), None

        init = (jnp.zeros(q.shape, F32), jnp.full(q.shape[:3], -jnp.inf, F32), k, v)
        (out, lse, k_last, v_last), _ = lax.scan(step_and_pass, init, jnp.arange(members - 1))
        out, lse = attend(out, lse, k_last, v_last, members - 1)
        return out.astype(q.dtype), lse

    def backward(q, k, v, out, lse, do):
        tokens = q.shape[1]
        q_pos = held_positions(0, tokens)
        delta = jnp.sum(do.astype(F32) * out.astype(F32), axis=-1)

        def grads(k, v, step):
            return chunked_backward(
                q,
                *split_kv(k, v, chunk_tokens, on_host=False),
                do,
                lse,
                delta,
                q_pos,
                held_positions(step, tokens),
                scale=scale,
                chunk_tokens=chunk_tokens,
            )

        def step_and_pass(carry, step):
            dq, k, v, dk, dv = carry
            dq_s, dk_s, dv_s = grads(k, v, step)
            return (dq + dq_s, *rotate(k, v, dk + dk_s, dv + dv_s)), None

        def zeros(x):
            return jnp.zeros(x.shape, F32)

        init = (zeros(q), k, v, zeros(k), zeros(v))
        (dq, k, v, dk, dv), _ = lax.scan(step_and_pass, init, jnp.arange(members - 1))
        dq_s, dk_s, dv_s = grads(k, v, members - 1)
        dk, dv = dk + dk_s, dv + dv_s
        if members > 1:
            dk, dv = rotate(dk, dv)  # home: the owner of this K/V shard is one step ahead
        return dq + dq_s, dk, dv

    @custom_vjp
    def ring_attention(q, k, v):
        return forward(q, k, v)[0]

    def ring_fwd(q, k, v):
        out, lse = forward(q, k, v)
        return out, tuple(to_host(x, offload) for x in (q, k, v, out, lse))

    def ring_bwd(residuals, do):
        q, k, v, out, lse = (to_device(x, offload) for x in residuals)
        dq, dk, dv = backward(q, k, v, out, lse, do)
        return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype)

    ring_attention.defvjp(ring_fwd, ring_bwd)
    return ring_attention
