"""Document-aware load balancing (`parallelism.loadBalance: documents`): a per-batch layout of
packed documents that evens out the masked attention work over the context axis.

Dual-chunk-swap balances one causal document per sequence; with many documents the work a
device's queries need is the pairs within their documents, which depends on where the boundaries
fall. Here every document is dealt over the devices the way dual-chunk-swap deals the sequence:
cut into 2C pieces, piece i on device i and piece 2C-1-i on device i as well, so each device does
an equal share of every document (a document of one token is one piece of one token).

The attention kernels still see the static dual-chunk-swap positions (`MASK_LAYOUT`). They are
used as sort keys: slot j of the layout has key `permutation(seq, C, MASK_LAYOUT)[j]`, and the
slots in key order are region 0 (device 0's first half), region 1, ..., region C-1, then the
second halves of devices C-1 ... 0. Piece i of every document goes to region i, documents in
their order, so within a document key order is token order, and "same document and key not
above" is exactly the causal document mask. RoPE positions (the true ones, `Layout.order`), the
targets and the loss mask are reordered by the same permutation, so the loss is the same sum.

The permutation depends on the batch's document boundaries only; the data path computes it on
the host, once per batch (`data.Batches`), and the model takes the batch as laid out.
"""

from __future__ import annotations

import numpy as np

from .load_balance import permutation

MASK_LAYOUT = "dual_chunk_swap"
"""The static layout whose positions the kernels mask with (they order each document's tokens)."""


def document_lengths(segments: np.ndarray) -> np.ndarray:
    """Lengths of the documents of one row of document ids [seq] (ids constant within a document)."""
    starts = np.flatnonzero(np.diff(segments, prepend=segments[0] - 1))
    return np.diff(np.append(starts, len(segments)))


def piece_sizes(lengths: np.ndarray, pieces: int) -> np.ndarray:
    """[documents, pieces] token counts: each document cut into `pieces` near-equal pieces, the
    remainders dealt round-robin over all documents so every piece index gets the same total."""
    sizes = np.repeat((lengths // pieces)[:, None], pieces, axis=1)
    cursor = 0
    for d, extra in enumerate(lengths % pieces):
        sizes[d, (cursor + np.arange(extra)) % pieces] += 1
        cursor += int(extra)
    return sizes


def document_permutation(segments: np.ndarray, context: int) -> np.ndarray:
    """`perm[j]`: the true position of slot j of the documents layout of one row [seq]."""
    seq = len(segments)
    regions = 2 * context
    if seq % regions:
        raise ValueError(f"seq_len {seq} is not divisible by {regions} (documents over context {context})")
    lengths = document_lengths(segments)
    sizes = piece_sizes(lengths, regions)
    starts = np.cumsum(sizes, axis=1) - sizes + (np.cumsum(lengths) - lengths)[:, None]
    by_key = np.concatenate(
        [np.arange(starts[d, i], starts[d, i] + sizes[d, i]) for i in range(regions) for d in range(len(lengths))]
    )
    return by_key[permutation(seq, context, MASK_LAYOUT)]


def device_work(segments: np.ndarray, perm: np.ndarray, context: int) -> np.ndarray:
    """[context] causal query-key pairs within documents that each device's queries need, for one
    row of natural-order document ids laid out by `perm` (contiguous shards of the layout)."""
    seq = len(segments)
    starts = np.searchsorted(segments, segments)  # first token of each token's document (ids ascending)
    keys_seen = np.arange(seq) - starts + 1
    return keys_seen[perm].reshape(context, -1).sum(1)
