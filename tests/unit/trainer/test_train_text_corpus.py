"""Loss falls when training byte-level on real text (the Python standard library's json package)."""

import json
from pathlib import Path

import numpy as np

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig
from support.tiny import tiny_trainer_config
from support.training import step_losses


def test_loss_falls_on_python_sources():
    corpus = Path(json.__file__).parent  # exists wherever Python does
    config = tiny_trainer_config(
        global_batch_tokens=512,
        steps=30,
        parallelism=ParallelConfig(data=2, context=2),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=5, schedule="constant"),
        data=DataConfig(kind="text", path=str(corpus), seed=0),
    )
    losses = step_losses(config)
    # Starts at the uniform-byte entropy ln(256) = 5.55; source code is far more predictable.
    assert abs(losses[0] - np.log(256)) < 0.1
    assert np.mean(losses[-5:]) < losses[0] - 2.0, losses
