"""Per-batch adaptive context parallelism: short packed documents are attended within their
device, and only the long ones go through the ring.

A batch in an adaptive layout holds, on every device of the context axis, `Variant.ring` slots of
the ring part and then `Variant.local` slots of the local part. Documents longer than the
threshold, and short ones that found no room in a local part, are laid out back to back in the
ring stream (C x ring slots, dual-chunk-swap over the ring parts); every other document sits
whole in one device's local part and never leaves it. Attention (`adaptive_attention`) is then
the ring over the ring parts plus a local attention over each local part, so the bytes sent over
the context axis scale with `ring`, not with the shard. Free slots are padding: their own
document id (`PAD_SEGMENT`), target weight 0, so the loss and every gradient are those of the
natural batch.

The variants are a small fixed set (`variants`): the per-device ring part a quarter, an eighth or
a sixteenth of the shard, or none, each with a slack of 1/16 of the shard for the padding that
whole-document packing needs, and the fixed layout (the whole shard in the ring, no padding) that
always fits. Each batch takes the smallest ring part that fits all its rows, so the step is
compiled at most once per variant.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .contract.load_balance import permutation
from .doc_balance import document_lengths

PAD = -1
"""`AdaptiveLayout.slots` entry of a padding slot."""

PAD_SEGMENT = -1
"""Document id of the padding slots (data ids count from 0)."""


class Variant(NamedTuple):
    """Slots per device: `ring` in the ring part (even: dual-chunk-swap halves), `local` after it."""

    ring: int
    local: int

    def seq(self, context: int) -> int:
        return context * (self.ring + self.local)


def variants(seq: int, context: int) -> tuple[Variant, ...]:
    """The compiled variants for `seq` tokens over `context` devices, smallest ring part first;
    the last is the fixed layout."""
    shard = seq // context
    if shard % 32:
        raise ValueError(f"adaptive context parallelism needs seq / context divisible by 32, got {shard}")
    slack = shard // 16
    adaptive = tuple(Variant(ring, shard + slack - ring) for ring in (0, shard // 16, shard // 8, shard // 4))
    return (*adaptive, Variant(shard, 0))


def default_threshold(seq: int, context: int) -> int:
    """Documents up to this many tokens count as short: half a shard."""
    return seq // context // 2


def _fill(lengths: np.ndarray, context: int, variant: Variant, threshold: int):
    """(ring documents, per-device local documents) or None when the documents do not fit."""
    ring_room = context * variant.ring - int(lengths[lengths > threshold].sum())
    if ring_room < 0:
        return None
    free = np.full(context, variant.local)
    work = np.zeros(context)
    local: list[list[int]] = [[] for _ in range(context)]
    in_ring = set(np.flatnonzero(lengths > threshold).tolist())
    for d in sorted(np.flatnonzero(lengths <= threshold), key=lambda d: -lengths[d]):
        fits = np.flatnonzero(free >= lengths[d])
        if len(fits):  # the device with the least attention work among those with room
            device = fits[np.argmin(work[fits])]
            local[device].append(int(d))
            free[device] -= lengths[d]
            work[device] += float(lengths[d]) ** 2
        elif lengths[d] <= ring_room:
            in_ring.add(int(d))
            ring_room -= int(lengths[d])
        else:
            return None
    return sorted(in_ring), [sorted(docs) for docs in local]


class AdaptiveLayout(NamedTuple):
    """One row: its variant and `slots[j]`, the true position of slot j (`PAD` for padding)."""

    variant: Variant
    slots: np.ndarray


def adaptive_layout(segments: np.ndarray, context: int, variant: Variant, threshold: int) -> AdaptiveLayout | None:
    """The layout of one row of natural-order document ids [seq] in `variant`, or None if it
    does not fit."""
    lengths = document_lengths(segments)
    starts = np.cumsum(lengths) - lengths
    filled = _fill(lengths, context, variant, threshold)
    if filled is None:
        return None
    ring_docs, local_docs = filled

    def tokens(docs, size):
        run = np.concatenate([np.arange(starts[d], starts[d] + lengths[d]) for d in docs] + [np.zeros(0, int)])
        return np.concatenate([run, np.full(size - len(run), PAD)])

    stream = tokens(ring_docs, context * variant.ring)
    ring = stream[permutation(len(stream), context, "dual_chunk_swap")] if variant.ring else stream
    parts = [
        np.concatenate([ring[d * variant.ring : (d + 1) * variant.ring], tokens(local_docs[d], variant.local)])
        for d in range(context)
    ]
    return AdaptiveLayout(variant, np.concatenate(parts))


def batch_layout(segments: np.ndarray, context: int, threshold: int) -> list[AdaptiveLayout]:
    """Every row [batch, seq] in the smallest variant that fits them all."""
    for variant in variants(segments.shape[1], context):
        rows = [adaptive_layout(row, context, variant, threshold) for row in segments]
        if all(row is not None for row in rows):
            return rows
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
