"""The learning-rate schedule of both trainers, as a multiplier of the peak learning rate: linear
warm-up from 0, then cosine decay to FINAL_FRACTION at the last step, or constant after the
warm-up. Written once with numpy-style operations, so that the JAX trainer evaluates it on traced
steps (`xp=jax.numpy`) and the PyTorch example on plain ints (numpy, the default)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .config import OptimizerConfig

FINAL_FRACTION = 0.1
"""The cosine decay ends at this fraction of the peak learning rate."""


def learning_rate_factor(opt: OptimizerConfig, steps: int, xp=np) -> Callable:
    """step -> multiplier of `opt.learning_rate` at that optimizer step of a `steps`-step run."""
    warmup = min(opt.warmup_steps, steps)
    rest = max(steps - warmup, 1)

    def factor(step):
        if opt.schedule == "constant":
            after = 1.0
        else:
            done = xp.clip((step - warmup) / rest, 0.0, 1.0)
            after = FINAL_FRACTION + (1 - FINAL_FRACTION) * 0.5 * (1 + xp.cos(xp.pi * done))
        return after if warmup == 0 else xp.where(step < warmup, step / warmup, after)

    return factor
