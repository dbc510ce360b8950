"""Context parallelism does not change training: context 4 follows context 1 for 20 steps."""

import json
from pathlib import Path

import jax
import numpy as np

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import train
from support.tiny import tiny_trainer_config


def _losses(context: int) -> list[float]:
    config = tiny_trainer_config(
        global_batch_tokens=128,
        steps=20,
        parallelism=ParallelConfig(context=context, attention="ring", load_balance="dual_chunk_swap"),
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


def test_context_4_follows_the_context_1_loss_curve():
    single, ring = _losses(1), _losses(4)
    assert len(single) == len(ring) == 20
    np.testing.assert_allclose(ring, single, rtol=0, atol=1e-4)  # fp32
    assert single[-1] < single[0] - 1.0  # a real curve (byte-level Python sources), not noise
