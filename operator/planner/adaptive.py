"""Adaptive context parallelism's saving, modelled for a distribution of document lengths.

With `parallelism.adaptive` the data path picks, per batch, the smallest ring part that fits every
row's documents (`longctx_trainer.contract.adaptive`, the same code the trainer runs), so the bytes a
device sends over the context axis depend on the corpus. Given a sample of its document lengths
(`data.packing.documentLengths`, which `longctx tokenize` prints), this module draws packed
sequences as the trainer's token source cuts them (documents back to back in random order, each
sequence a window at a random offset, so a window starts inside a document with probability
proportional to its length), picks each step's variant and sums `ring_bytes` over the layers and a
device's sequences, against the fixed ring's. It runs in `longctx plan`, not in the operator's
planning (the draw is bounded, but it is not needed to choose a layout); the step time is not
changed by it (docs/planner.md).
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from longctx_trainer.contract.adaptive import fitting_variant, ring_bytes
from longctx_trainer.contract.config import Precision
from longctx_trainer.contract.model import ModelConfig

from .costs import dtype_bytes
from .layouts import Layout
from .plan import Plan

STEPS = 64
"""Steps drawn (each with a device's sequences)."""
DOCUMENT_BUDGET = 1_000_000
"""At most this many documents x context devices placed in all: bounds the model's time."""


@dataclass(frozen=True)
class AdaptiveSaving:
    """Bytes one device sends over the context axis per step, all layers, forward and backward."""

    fixed_bytes: float
    adaptive_bytes: float
    ring_parts: tuple[tuple[int, int], ...]  # (ring part in tokens per device, steps that took it)
    steps: int
    enabled: bool  # parallelism.adaptive is on (else: what turning it on would save)

    @property
    def ratio(self) -> float:
        return math.inf if self.adaptive_bytes == 0 else self.fixed_bytes / self.adaptive_bytes


def _window(sample: list[int], seq: int, rng: random.Random) -> list[int]:
    """The document lengths of one packed sequence of `seq` tokens, in order."""
    first = rng.choices(sample, weights=sample)[0]  # where a random offset lands: length-biased
    lengths = [rng.randint(1, first)]  # the part of it from the offset on
    total = lengths[0]
    while total < seq:
        lengths.append(rng.choice(sample))
        total += lengths[-1]
    lengths[-1] -= total - seq
    return lengths


def adaptive_saving(plan: Plan, seed: int = 0) -> AdaptiveSaving | None:
    """The modelled saving for the plan's layout and the request's length sample; None without a
    sample, or where adaptive context parallelism cannot run (attention other than ring, context 1,
    offload, shards not a multiple of 32) or the draw would exceed DOCUMENT_BUDGET."""
    req, layout = plan.request, plan.chosen.layout
    if not req.document_lengths or plan.chosen.attention != "ring" or plan.chosen.offload:
        return None
    rows = max(1, req.batch_sequences // layout.data)
    return saving(req.model, req.precision, req.sequence_length, layout, rows, req.document_lengths, req.adaptive, seed)


def saving(
    model: ModelConfig,
    precision: Precision,
    seq: int,
    layout: Layout,
    rows: int,
    sample: Sequence[int],
    enabled: bool,
    seed: int = 0,
) -> AdaptiveSaving | None:
    """`adaptive_saving` for a ring layout given as its parts: `rows` sequences per device."""
    sample = [n for n in sample if n > 0]
    context = layout.context
    if not sample or context == 1 or (seq // context) % 32:
        return None
    per_step = rows * seq / (sum(sample) / len(sample)) * context
    steps = min(STEPS, int(DOCUMENT_BUDGET // per_step))
    if steps < 1:
        return None
    rng = random.Random(seed)

    def step_bytes(ring: int) -> float:
        one = ring_bytes(ring, context, model.kv_heads // layout.tensor, model.head_dim, dtype_bytes(precision))
        return float(model.layers * rows * one)

    chosen: Counter = Counter()
    for _ in range(steps):
        variant = fitting_variant([_window(sample, seq, rng) for _ in range(rows)], seq, context)
        chosen[variant.ring] += 1
    adaptive = sum(step_bytes(ring) * n for ring, n in chosen.items()) / steps
    return AdaptiveSaving(step_bytes(seq // context), adaptive, tuple(sorted(chosen.items())), steps, enabled)
