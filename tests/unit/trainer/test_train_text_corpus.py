"""Loss falls when training byte-level on real text (the Python standard library's json package)."""

import json
from pathlib import Path

import jax
import numpy as np

from longctx_trainer.config import DataConfig, ModelConfig, OptimizerConfig, ParallelConfig, TrainerConfig
from longctx_trainer.mesh import make_mesh
from longctx_trainer.metrics import TrainMetrics
from longctx_trainer.train import train


def test_loss_falls_on_python_sources():
    corpus = Path(json.__file__).parent  # exists wherever Python does
    config = TrainerConfig(
        model=ModelConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256),
        sequence_length=64,
        global_batch_tokens=512,
        steps=30,
        precision="fp32",
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
