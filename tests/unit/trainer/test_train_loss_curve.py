"""Context parallelism does not change training: context 4 follows context 1 for 20 steps."""

import json
from pathlib import Path

import numpy as np

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig
from support.tiny import tiny_trainer_config
from support.training import step_losses


def _losses(context: int) -> list[float]:
    config = tiny_trainer_config(
        global_batch_tokens=128,
        steps=20,
        parallelism=ParallelConfig(context=context, attention="ring", load_balance="dual_chunk_swap"),
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=3),
        data=DataConfig(kind="text", path=str(Path(json.__file__).parent), seed=5),
        seed=2,
    )
    return step_losses(config)


def test_context_4_follows_the_context_1_loss_curve():
    single, ring = _losses(1), _losses(4)
    assert len(single) == len(ring) == 20
    np.testing.assert_allclose(ring, single, rtol=0, atol=1e-4)  # fp32
    assert single[-1] < single[0] - 1.0  # a real curve (byte-level Python sources), not noise
