"""TokenRing attention: exact context-parallel attention in which the queries travel and the K/V stay.

After the TokenRing paper's idea (queries and partial results move in opposite directions, so both
directions of every link carry data at once); this is its own formulation on the "context" axis.
Runs per device inside `jax.shard_map`.

Forward, C members: at step s a device holds the queries of the member s places behind it (they
arrived from its predecessor over the forward direction of the link, `lax.ppermute` by +1), attends
them to its own K/V shard, and sends the partial result (out and log-sum-exp, fp32) straight back
to their owner (`ppermute` by -s). The owner merges the partials by online softmax. So in every
step the queries use one direction of the links and the partial outputs the other; ring attention
(ops/ring.py) moves K and V in one direction and leaves the other idle. On a switched fabric
(NVLink/NVSwitch, an InfiniBand rail) the backward send of step s is one hop like any other.

Backward: the query side (q, dO, lse, delta) travels forward the same way; each device adds the
dK/dV of its own K/V shard locally (nothing to bring home at the end) and sends each step's dQ
(fp32) straight back to the owner of those queries.

Which is cheaper depends on the head counts: per step the busiest direction carries the queries
(heads x head_dim) against the ring's K and V (2 x kv_heads x head_dim); the planner's cost model
weighs them (operator/planner/timing.py). Any layout's positions and document masks work, through
the chunk-pair masks and skips of ops/chunked.py (the dual-chunk-swap layout included: its fully
masked halves are skipped there). The loop over steps is unrolled: each step's backward send has
its own static shift.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from .block import F32, merge_partials
from .chunked import LocalAttention, Span, chunked_backward, chunked_forward, split_kv
from .offload import to_device, to_host


def make_token_ring_attention(*, axis: str, axis_size: int, positions, scale: float, chunk_tokens, offload: bool):
    """Per-device TokenRing attention for use inside shard_map over `axis` (module docstring);
    `positions` (numpy [seq], layout order) gives true token positions, None for non-causal
    attention; `segments` [b, t] the local tokens' document ids, or None."""
    members = axis_size

    def forward_shift(*xs):
        return tuple(lax.ppermute(x, axis, [(i, (i + 1) % members) for i in range(members)]) for x in xs)

    def back_to_owner(step, *xs):
        """From the device holding the queries of `step` members back to their owner."""
        return tuple(lax.ppermute(x, axis, [(i, (i - step) % members) for i in range(members)]) for x in xs)

    def span_of(step, tokens, seg):
        """The span of the queries held at `step`: they came from `step` members back."""
        if positions is None:
            return Span(None, seg)
        source = (lax.axis_index(axis) - step) % members
        return Span(lax.dynamic_slice_in_dim(jnp.asarray(positions), source * tokens, tokens), seg)

    def travelling(segments, *xs):
        """The query-side arrays that travel, with the document ids when there are any."""
        return xs if segments is None else (*xs, segments)

    def forward(q, k, v, segments):
        tokens = q.shape[1]
        k_chunks, v_chunks = split_kv(k, v, chunk_tokens, on_host=False)
        k_span = span_of(0, tokens, segments)
        held = travelling(segments, q)
        out = lse = None
        for step in range(members):
            if step:
                held = forward_shift(*held)
            part = chunked_forward(
                held[0],
                k_chunks,
                v_chunks,
                span_of(step, tokens, held[1] if segments is not None else None),
                k_span,
                scale=scale,
                chunk_tokens=chunk_tokens,
            )
            if step:  # in fp32: bf16 partial outputs broke the bf16 tolerance (out, dq, dk, dv)
                part = back_to_owner(step, *part)
            out, lse = part if out is None else merge_partials(out, lse, *part)
        return out.astype(q.dtype), lse

    def backward(q, k, v, segments, out, lse, do):
        tokens = q.shape[1]
        k_chunks, v_chunks = split_kv(k, v, chunk_tokens, on_host=False)
        k_span = span_of(0, tokens, segments)
        delta = jnp.sum(do.astype(F32) * out.astype(F32), axis=-1)
        held = travelling(segments, q, do, lse, delta)
        dq = jnp.zeros(q.shape, F32)
        dk, dv = jnp.zeros(k.shape, F32), jnp.zeros(v.shape, F32)
        for step in range(members):
            if step:
                held = forward_shift(*held)
            dq_s, dk_s, dv_s = chunked_backward(
                *held[:1],
                k_chunks,
                v_chunks,
                *held[1:4],
                span_of(step, tokens, held[4] if segments is not None else None),
                k_span,
                scale=scale,
                chunk_tokens=chunk_tokens,
            )
            dk, dv = dk + dk_s, dv + dv_s
            dq = dq + (back_to_owner(step, dq_s)[0] if step else dq_s)
        return dq, dk, dv

    def fwd(q, k, v, segments):
        out, lse = forward(q, k, v, segments)
        return out, (tuple(to_host(x, offload) for x in (q, k, v, out, lse)), segments)

    def bwd(residuals, do):
        saved, segments = residuals
        q, k, v, out, lse = (to_device(x, offload) for x in saved)
        return backward(q, k, v, segments, out, lse, do)

    return LocalAttention(fwd, bwd)
