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

The variants are a small fixed set (`variants`, in contract/adaptive.py, which the planner
shares): the per-device ring part a quarter, an eighth or a sixteenth of the shard, or none, each
with a slack of 1/16 of the shard for the padding that whole-document packing needs, and the fixed
layout (the whole shard in the ring, no padding) that always fits. Each batch takes the smallest
ring part that fits all its rows, so the step is compiled at most once per variant.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .contract.adaptive import Variant, default_threshold, fill, fitting_variant
from .contract.load_balance import permutation
from .doc_balance import document_lengths

PAD = -1
"""`AdaptiveLayout.slots` entry of a padding slot."""

PAD_SEGMENT = -1
"""Document id of the padding slots (data ids count from 0)."""


class AdaptiveLayout(NamedTuple):
    """One row: its variant and `slots[j]`, the true position of slot j (`PAD` for padding)."""

    variant: Variant
    slots: np.ndarray


def adaptive_layout(segments: np.ndarray, context: int, variant: Variant, threshold: int) -> AdaptiveLayout | None:
    """The layout of one row of natural-order document ids [seq] in `variant`, or None if it
    does not fit."""
    lengths = document_lengths(segments)
    starts = np.cumsum(lengths) - lengths
    filled = fill(lengths, context, variant, threshold)
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


def batch_layout(segments: np.ndarray, context: int) -> list[AdaptiveLayout]:
    """Every row [batch, seq] in the smallest variant that fits them all (`fitting_variant`)."""
    seq = segments.shape[1]
    variant = fitting_variant((document_lengths(row) for row in segments), seq, context)
    return [adaptive_layout(row, context, variant, default_threshold(seq, context)) for row in segments]
