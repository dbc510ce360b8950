"""Context parallelism does not change training: context 4 (ring, and TokenRing) follows context 1
for 20 steps. The documents layout and adaptive context parallelism are checked the same way in
test_doc_balance.py and test_adaptive_cp.py (they need packed documents)."""

import functools
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import train
from support.tiny import tiny_trainer_config


@functools.cache
def _losses(context: int, attention: str = "ring") -> list[float]:
    config = tiny_trainer_config(
        global_batch_tokens=128,
        steps=20,
        parallelism=ParallelConfig(context=context, attention=attention, load_balance="dual_chunk_swap"),
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=3),
        data=DataConfig(kind="text", path=str(Path(json.__file__).parent), seed=5),
        seed=2,
    )
    events = []
    train(
        config,
        make_mesh(config.parallelism, jax.devices()[:context]),
        emit=events.append,
        metrics=TrainMetrics("test", 0),
        peak_flops_per_device=1e12,
    )
    return [e["loss"] for e in events if e["event"] == "step"]


@pytest.mark.parametrize("attention", ["ring", "token_ring"])
def test_context_4_follows_the_context_1_loss_curve(attention):
    single, parallel = _losses(1), _losses(4, attention)
    assert len(single) == len(parallel) == 20
    np.testing.assert_allclose(parallel, single, rtol=0, atol=1e-4)  # fp32
    assert single[-1] < single[0] - 1.0  # a real curve (byte-level Python sources), not noise
