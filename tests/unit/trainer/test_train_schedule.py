"""Learning-rate schedule and weight-decay mask of the optimizer (clipping is optax's own)."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longctx_trainer.config import OptimizerConfig
from longctx_trainer.train import learning_rate_schedule, make_optimizer


def test_linear_warmup_then_cosine_to_ten_percent():
    schedule = learning_rate_schedule(OptimizerConfig(learning_rate=1.0, warmup_steps=4), 14)
    assert [float(schedule(s)) for s in range(5)] == pytest.approx([0, 0.25, 0.5, 0.75, 1])
    assert float(schedule(9)) == pytest.approx(0.1 + 0.9 * 0.5)  # half-way through the decay
    assert float(schedule(14)) == pytest.approx(0.1)


def test_constant_after_warmup_and_no_warmup():
    constant = learning_rate_schedule(OptimizerConfig(learning_rate=2.0, warmup_steps=2, schedule="constant"), 10)
    assert [float(constant(s)) for s in (0, 1, 2, 9)] == pytest.approx([0, 1, 2, 2])
    assert float(learning_rate_schedule(OptimizerConfig(warmup_steps=0), 10)(0)) == pytest.approx(3e-4)


def test_weight_decay_spares_norm_scales():
    opt = make_optimizer(
        OptimizerConfig(learning_rate=1.0, warmup_steps=0, weight_decay=0.5, grad_clip=1.0, schedule="constant"), 10
    )
    params = {"w": jnp.full((2, 2), 2.0), "attn_norm": jnp.full((2, 2), 2.0)}
    zero = {"w": jnp.zeros((2, 2)), "attn_norm": jnp.zeros((2, 2))}
    updates, _ = opt.update(zero, opt.init(params), params)
    new = optax.apply_updates(params, updates)
    np.testing.assert_allclose(new["w"], 2.0 - 1.0 * 0.5 * 2.0)  # decayed
    np.testing.assert_allclose(new["attn_norm"], 2.0)  # not decayed
