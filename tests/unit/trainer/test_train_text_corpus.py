"""Loss falls when training byte-level on real text (the Python standard library's json package)."""

import json
from pathlib import Path

import jax
import numpy as np

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import train
from support.tiny import tiny_trainer_config


def test_loss_falls_on_python_sources():
    corpus = Path(json.__file__).parent  # exists wherever Python does
    config = tiny_trainer_config(
        global_batch_tokens=512,
        steps=30,
        parallelism=ParallelConfig(data=2, context=2),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=5, schedule="constant"),
        data=DataConfig(kind="text", path=str(corpus), seed=0),
    )
    events = []
    train(
        config,
        make_mesh(config.parallelism, jax.devices()[:4]),
        emit=events.append,
        metrics=TrainMetrics("test", 0),
        peak_flops_per_device=1e12,
    )
    losses = [e["loss"] for e in events if e["event"] == "step"]
    # Starts at the uniform-byte entropy ln(256) = 5.55; source code is far more predictable.
    assert abs(losses[0] - np.log(256)) < 0.1
    assert np.mean(losses[-5:]) < losses[0] - 2.0, losses
