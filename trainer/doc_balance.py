"""Document-aware load balancing (`parallelism.loadBalance: documents`): a per-batch layout of
packed documents that evens out the masked attention work over the context axis.

Dual-chunk-swap balances one causal document per sequence; with many documents the work a
device's queries need is the pairs within their documents, which depends on where the boundaries
fall. Dealing every document over all devices balances it but puts a piece of every document in
every block, so no block pair is skipped any more. Here each half-shard (region) is cut into
`BLOCKS_PER_REGION` blocks (the kernels' chunks), and documents are placed by whole block pairs:
a pair is a block of region i and the mirrored block of region 2C-1-i (both on device i), which
hold a head and a tail of one document, so the pair's causal work is block * (length + 1)
wherever it sits. Pairs go heaviest first to the device with the least work and room. What does
not fill whole pairs (short documents, remainders) is the loose stream, in document order, laid
into the remaining pairs' blocks; so nearly every block holds one document (or a contiguous run
of short ones) and skipping stays as in the natural order (a document of one token is loose).

The attention kernels still see the static dual-chunk-swap positions (`MASK_LAYOUT`). They are
used as sort keys: slot j of the layout has key `permutation(seq, C, MASK_LAYOUT)[j]`, and the
slots in key order are region 0 (device 0's first half), region 1, ..., region C-1, then the
second halves of devices C-1 ... 0. Each document's tokens fill its slots in key order, so
within a document key order is token order, and "same document and key not above" is exactly
the causal document mask. RoPE positions (the true ones, `Layout.order`), the
targets and the loss mask are reordered by the same permutation, so the loss is the same sum.

The permutation depends on the batch's document boundaries only; the data path computes it on
the host, once per batch (`data.Batches`), and the model takes the batch as laid out.
"""

from __future__ import annotations

import numpy as np

from .contract.config import LoadBalance
from .contract.load_balance import permutation

MASK_LAYOUT: LoadBalance = "dual_chunk_swap"
"""The static layout whose positions the kernels mask with (they order each document's tokens)."""


BLOCKS_PER_REGION = 4
"""Each half-shard (region) is cut into this many blocks; the kernels use the block as their chunk."""


def layout_block(region_tokens: int) -> int:
    """Tokens per block of the documents layout, for regions (half-shards) of `region_tokens`."""
    return region_tokens // BLOCKS_PER_REGION if region_tokens % BLOCKS_PER_REGION == 0 else region_tokens


def document_lengths(segments: np.ndarray) -> np.ndarray:
    """Lengths of the documents of one row of document ids [seq] (ids constant within a document)."""
    starts = np.flatnonzero(np.diff(segments, prepend=segments[0] - 1))
    return np.diff(np.append(starts, len(segments)))


def _place_pairs(lengths: np.ndarray, block: int, context: int, units: int) -> list[list[int]]:
    """Per device, the documents of its block pairs (-1: a pair of the loose stream), heaviest
    first onto the lightest device with room. A block pair of document d weighs its length (the
    pair's causal work, head and tail, is block * (length + 1)); a loose pair the mean of the rest."""
    pairs = lengths // block // 2
    loose_tokens = len(lengths) and int(lengths.sum() - 2 * block * pairs.sum())
    loose_weight = (lengths**2 - (2 * block * pairs) ** 2).sum() / max(loose_tokens, 1)
    items = sorted([(float(n), d) for d, n in enumerate(lengths) for _ in range(pairs[d])], reverse=True)
    items += [(loose_weight, -1)] * (loose_tokens // (2 * block))
    items.sort(key=lambda item: -item[0])
    load, placed = np.zeros(context), [[] for _ in range(context)]
    for weight, doc in items:
        device = min((i for i in range(context) if len(placed[i]) < units), key=lambda i: load[i])
        placed[device].append(doc)
        load[device] += weight
    return placed


def document_permutation(segments: np.ndarray, context: int) -> np.ndarray:
    """`perm[j]`: the true position of slot j of the documents layout of one row [seq]."""
    seq = len(segments)
    regions = 2 * context
    if seq % regions:
        raise ValueError(f"seq_len {seq} is not divisible by {regions} (documents over context {context})")
    region = seq // regions
    block = layout_block(region)
    units = region // block
    lengths = document_lengths(segments)
    placed = _place_pairs(lengths, block, context, units)
    pairs = lengths // block // 2
    # the loose stream: what is not in block pairs, documents in id order (block id ranges stay tight)
    loose = np.repeat(np.arange(len(lengths)), lengths - 2 * block * pairs)
    blocks = np.empty((regions, units), dtype=object)  # document of each key block, or a loose slice
    for device, docs in enumerate(placed):
        for t, doc in enumerate(sorted(docs, key=lambda d: (d < 0, d))):
            blocks[device, t] = blocks[regions - 1 - device, units - 1 - t] = doc
    key_docs, cursor = [], 0
    for doc in blocks.reshape(-1):
        if doc >= 0:
            key_docs.append(np.full(block, doc))
        else:
            key_docs.append(loose[cursor : cursor + block])
            cursor += block
    key_docs = np.concatenate(key_docs)
    # each document's tokens, in order, to its key slots in key order
    starts = np.cumsum(lengths) - lengths
    order = np.argsort(key_docs, kind="stable")
    by_key = np.empty(seq, dtype=np.int64)
    by_key[order] = np.arange(seq) - np.repeat(np.cumsum(lengths) - lengths, lengths) + np.repeat(starts, lengths)
    return by_key[permutation(seq, context, MASK_LAYOUT)]


def device_work(segments: np.ndarray, perm: np.ndarray, context: int) -> np.ndarray:
    """[context] causal query-key pairs within documents that each device's queries need, for one
    row of natural-order document ids laid out by `perm` (contiguous shards of the layout)."""
    seq = len(segments)
    starts = np.searchsorted(segments, segments)  # first token of each token's document (ids ascending)
    keys_seen = np.arange(seq) - starts + 1
    return keys_seen[perm].reshape(context, -1).sum(1)
