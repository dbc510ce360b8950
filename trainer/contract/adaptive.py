"""Adaptive context parallelism's choice of variant, shared by the trainer's data path
(`longctx_trainer.adaptive_cp`, which lays the batch out) and the planner (which models the bytes it
saves for a distribution of document lengths).

A device's shard is a ring part (documents longer than `default_threshold`, and short ones that
find no room, go through the ring) and a local part (short documents, whole, attended on the
device). `variants` is the small fixed set of ring parts a step can be compiled for; a batch takes
the smallest that fits all its rows (`fitting_variant`), and `ring_bytes` is what a device sends
over the context axis for one layer with a given ring part. Plain Python: the operator's install
(which runs the planner) has no numpy.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Variant(NamedTuple):
    """Slots per device: `ring` in the ring part (even: dual-chunk-swap halves), `local` after it."""

    ring: int
    local: int

    def seq(self, context: int) -> int:
        return context * (self.ring + self.local)


SHARD_MULTIPLE = 32
"""A device's shard must be a multiple of this: the smallest ring part, a sixteenth of the shard,
is laid out in two dual-chunk-swap halves."""


def shard_fits(seq: int, context: int) -> bool:
    """Whether `seq` tokens over `context` devices give shards the variants can lay out."""
    return (seq // context) % SHARD_MULTIPLE == 0


def padded_shard(shard: int) -> int:
    """A device's slots in an adaptive variant: its shard and a sixteenth of slack, so that short
    documents fit whole beside the ring part (the planner counts their memory with it)."""
    return shard + shard // 16


def variants(seq: int, context: int) -> tuple[Variant, ...]:
    """The compiled variants for `seq` tokens over `context` devices, smallest ring part first;
    the last is the fixed layout."""
    shard = seq // context
    if not shard_fits(seq, context):
        raise ValueError(f"adaptive context parallelism needs seq / context divisible by {SHARD_MULTIPLE}, got {shard}")
    adaptive = tuple(Variant(ring, padded_shard(shard) - ring) for ring in (0, shard // 16, shard // 8, shard // 4))
    return (*adaptive, Variant(shard, 0))


def default_threshold(seq: int, context: int) -> int:
    """Documents up to this many tokens count as short: half a shard."""
    return seq // context // 2


def fill(lengths: Sequence[int], context: int, variant: Variant, threshold: int):
    """(ring documents, per-device local documents) or None when the documents do not fit.
    Documents longer than `threshold` go to the ring; the others, largest first, to the device
    with the least attention work among those with room, else to the ring while it has room."""
    lengths = [int(n) for n in lengths]
    in_ring = {d for d, n in enumerate(lengths) if n > threshold}
    ring_room = context * variant.ring - sum(lengths[d] for d in in_ring)
    if ring_room < 0:
        return None
    free = [variant.local] * context
    work = [0.0] * context
    local: list[list[int]] = [[] for _ in range(context)]
    for d in sorted((d for d, n in enumerate(lengths) if n <= threshold), key=lambda d: -lengths[d]):
        fits = [c for c in range(context) if free[c] >= lengths[d]]
        if fits:
            device = min(fits, key=work.__getitem__)  # the first of the least loaded
            local[device].append(d)
            free[device] -= lengths[d]
            work[device] += float(lengths[d]) ** 2
        elif lengths[d] <= ring_room:
            in_ring.add(d)
            ring_room -= lengths[d]
        else:
            return None
    return sorted(in_ring), [sorted(docs) for docs in local]


def fitting_variant(rows: Iterable[Sequence[int]], seq: int, context: int) -> Variant:
    """The smallest variant that fits every row, each given by its documents' lengths in order
    (the last variant, the fixed layout, always fits)."""
    rows = list(rows)
    threshold = default_threshold(seq, context)
    for variant in variants(seq, context):
        if all(fill(lengths, context, variant, threshold) is not None for lengths in rows):
            return variant
    raise AssertionError("the fixed variant always fits")  # pragma: no cover


def ring_bytes(ring_tokens: int, context: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes one device sends over the context axis for one layer's attention, forward and
    backward: K and V (and their document ids) at each of the C-1 forward steps, K, V and the
    fp32 dK/dV at the C-1 backward steps and the final shift home (ops/ring.py)."""
    if context == 1 or ring_tokens == 0:
        return 0
    kv = ring_tokens * kv_heads * head_dim
    forward = (context - 1) * (2 * kv * dtype_bytes + 4 * ring_tokens)
    backward = (context - 1) * (2 * kv * dtype_bytes + 4 * ring_tokens + 2 * kv * 4) + 2 * kv * 4
    return forward + backward


LENGTH_SAMPLES = 256
"""Document lengths a length sample holds (`length_sample`; `data.packing.documentLengths`)."""


def length_sample(lengths: Sequence[int]) -> list[int]:
    """At most LENGTH_SAMPLES lengths that stand for `lengths`: their quantiles at the midpoints
    of LENGTH_SAMPLES equal slices (all of them, sorted, when fewer), so drawing uniformly from the
    sample draws from the distribution, its long tail included."""
    ordered = sorted(int(n) for n in lengths)
    if len(ordered) <= LENGTH_SAMPLES:
        return ordered
    return [ordered[(2 * i + 1) * len(ordered) // (2 * LENGTH_SAMPLES)] for i in range(LENGTH_SAMPLES)]
