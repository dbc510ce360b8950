"""Learning-rate schedule (schedule.py, as the JAX trainer runs it and as the PyTorch example does)
and weight-decay mask of the optimizer (clipping is optax's own)."""

import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longctx_trainer.contract.config import OptimizerConfig
from longctx_trainer.contract.schedule import learning_rate_factor
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


@pytest.mark.parametrize(
    "opt, steps",
    [
        (OptimizerConfig(learning_rate=2.0, warmup_steps=4), 14),
        (OptimizerConfig(learning_rate=2.0, warmup_steps=0), 10),
        (OptimizerConfig(learning_rate=2.0, warmup_steps=3, schedule="constant"), 8),
        (OptimizerConfig(learning_rate=2.0, warmup_steps=20), 10),  # warm-up longer than the run
    ],
)
def test_plain_steps_get_the_traced_schedule(opt, steps):
    """The PyTorch example evaluates the schedule on ints with numpy; the JAX trainer on traced
    counts with jax.numpy: the same values."""
    factor = learning_rate_factor(opt, steps)
    schedule = learning_rate_schedule(opt, steps)
    for step in range(steps + 2):
        traced = float(schedule(jnp.int32(step)))
        assert opt.learning_rate * float(factor(step)) == pytest.approx(traced, rel=1e-6, abs=1e-7)


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
