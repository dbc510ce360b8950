"""Adaptive context parallelism's saving and step time, modelled for a distribution of document
lengths.

With `parallelism.adaptive` the data path picks, per batch, the smallest ring part that fits every
row's documents (`longctx_trainer.contract.adaptive`, the same code the trainer runs), so the bytes a
device sends over the context axis depend on the corpus. Given a sample of its document lengths
(`data.packing.documentLengths`, which `longctx tokenize` prints), this module draws packed
sequences as the trainer's token source cuts them (documents back to back in random order, each
sequence a window at a random offset, so a window starts inside a document with probability
proportional to its length) and picks each step's variant (`variant_mix`). From that mix it sums
`ring_bytes` over the layers and a device's sequences, against the fixed ring's (`longctx plan`
prints it), and averages the step time over the variants (`expected_step`, which the planner
uses to choose the layout when `parallelism.adaptive` is on; docs/planner.md). The draw is bounded
(DOCUMENT_BUDGET) and cached per (sequence, context, rows, sample): the layouts a plan compares
share it.
"""

from __future__ import annotations

import functools
import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from longctx_trainer.contract.adaptive import Variant, fitting_variant, ring_bytes, shard_fits
from longctx_trainer.contract.config import Precision
from longctx_trainer.contract.model import ModelConfig

from .costs import dtype_bytes
from .layouts import Layout
from .timing import StepInputs, StepTime, step_time

if TYPE_CHECKING:  # plan.py uses this module to time its candidates
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


VariantMix = tuple[tuple[Variant, int], ...]
"""The variants the drawn steps took, smallest ring part first, each with how many steps took it."""


@functools.lru_cache(maxsize=64)
def variant_mix(seq: int, context: int, rows: int, sample: tuple[int, ...], seed: int = 0) -> VariantMix | None:
    """The trainer's variant (`fitting_variant`) for each of up to STEPS drawn steps of `rows`
    packed sequences per device; None with no positive length, context 1, shards not a multiple
    of 32, or a draw beyond DOCUMENT_BUDGET."""
    lengths = [n for n in sample if n > 0]
    if not lengths or context == 1 or not shard_fits(seq, context):
        return None
    per_step = rows * seq / (sum(lengths) / len(lengths)) * context
    steps = min(STEPS, int(DOCUMENT_BUDGET // per_step))
    if steps < 1:
        return None
    rng = random.Random(seed)
    chosen = Counter(
        fitting_variant([_window(lengths, seq, rng) for _ in range(rows)], seq, context) for _ in range(steps)
    )
    return tuple(sorted(chosen.items()))


def expected_step(inp: StepInputs, mix: VariantMix) -> StepTime:
    """The mean step time over the mix: each part of the step with each variant's ring and local
    slots (timing.py), weighted by the steps that took it."""
    steps = sum(n for _, n in mix)
    times = [(step_time(replace(inp, variant=variant)), n) for variant, n in mix]
    return StepTime(**{f.name: sum(getattr(t, f.name) * n for t, n in times) / steps for f in fields(StepTime)})


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
    context = layout.context
    mix = variant_mix(seq, context, rows, tuple(sample), seed)
    if mix is None:
        return None

    def step_bytes(ring: int) -> float:
        one = ring_bytes(ring, context, model.kv_heads // layout.tensor, model.head_dim, dtype_bytes(precision))
        return float(model.layers * rows * one)

    steps = sum(n for _, n in mix)
    adaptive = sum(step_bytes(variant.ring) * n for variant, n in mix) / steps
    parts = tuple((variant.ring, n) for variant, n in mix)
    return AdaptiveSaving(step_bytes(seq // context), adaptive, parts, steps, enabled)
