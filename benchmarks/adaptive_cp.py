"""Bytes over the context axis per step: adaptive context parallelism against the fixed ring.

    python benchmarks/adaptive_cp.py [--seqs 131072 262144 1048576 2097152] [--contexts 8 16] [--steps 20]

The documents are numpy's own .py files (the numpy wheel from PyPI that the venv has), one
document per file, its length in tokens taken as bytes / 4 (about a BPE token's worth of
source; a stated assumption, not a tokenizer's count), in a fixed shuffled order and packed back
to back; each step is one window at a random offset, as the trainer's token source cuts them.
Per window, `adaptive_cp.batch_layout` picks the variant; the bytes are `contract.adaptive.ring_bytes`
for one layer (bf16 K/V, 8 K/V heads of 128: Llama-3-8B's), summed over the steps. Host-only:
no attention runs here (tests/unit/trainer/test_adaptive_cp.py checks the numerics). The
"planner" column is `longctx plan`'s model of the same ratio (operator/planner/adaptive.py), from
the 256-length sample of these lengths that `longctx tokenize` would record
(`data.packing.documentLengths`), for Llama-3-8B in bf16.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from longctx_operator.planner.adaptive import saving
from longctx_operator.planner.layouts import Layout
from longctx_trainer.adaptive_cp import batch_layout
from longctx_trainer.contract.adaptive import length_sample, ring_bytes
from longctx_trainer.contract.presets import PRESETS


def numpy_source_lengths() -> np.ndarray:
    files = sorted(Path(np.__file__).parent.rglob("*.py"))
    lengths = np.array([f.stat().st_size // 4 + 1 for f in files])
    return lengths[np.random.default_rng(1).permutation(len(lengths))]


def context_bytes(lengths: np.ndarray, seq: int, context: int, steps: int) -> tuple[int, int, Counter]:
    """(fixed bytes, adaptive bytes, ring parts chosen) over `steps` windows."""
    copies = seq // int(lengths.sum()) + 2  # the corpus again, in the same order, when it is short
    ids = np.repeat(np.arange(copies * len(lengths)), np.tile(lengths, copies))
    rng = np.random.default_rng(0)
    fixed = adaptive = 0
    rings: Counter = Counter()
    for _ in range(steps):
        start = rng.integers(0, len(ids) - seq)
        segments = ids[start : start + seq]
        (layout,) = batch_layout((segments - segments[0])[None], context)
        rings[layout.variant.ring] += 1
        fixed += ring_bytes(seq // context, context, 8, 128, 2)
        adaptive += ring_bytes(layout.variant.ring, context, 8, 128, 2)
    return fixed, adaptive, rings


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, nargs="+", default=[131072, 262144, 1048576, 2097152])
    parser.add_argument("--contexts", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    lengths = numpy_source_lengths()
    p50, p90, p99 = np.percentile(lengths, [50, 90, 99])
    print(f"{len(lengths)} documents, {lengths.sum()} tokens; median {p50:.0f}, p90 {p90:.0f}, p99 {p99:.0f}")
    sample = length_sample(lengths)  # what `longctx tokenize` records: the planner's input
    print(f"{'seq':>8} {'context':>7} {'fixed/adaptive':>14} {'planner':>8}  ring part per device: steps")
    for seq in args.seqs:
        for context in args.contexts:
            fixed, adaptive, rings = context_bytes(lengths, seq, context, args.steps)
            ratio = "inf" if adaptive == 0 else f"{fixed / adaptive:.2f}"
            chosen = ", ".join(f"{ring}: {n}" for ring, n in sorted(rings.items()))
            modelled = saving(PRESETS["llama3-8b"], "bf16", seq, Layout(1, context, 1), 1, sample, True)
            planner = "-" if modelled is None else "inf" if modelled.adaptive_bytes == 0 else f"{modelled.ratio:.2f}"
            print(f"{seq:>8} {context:>7} {ratio:>14} {planner:>8}  {chosen}", flush=True)


if __name__ == "__main__":
    main()
