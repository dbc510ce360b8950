"""Context parallelism does not change training: context 4 (ring, and TokenRing) follows context 1
for 20 steps. The documents layout and adaptive context parallelism are checked the same way in
test_doc_balance.py and test_adaptive_cp.py (they need packed documents)."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig
from support.tiny import tiny_trainer_config
from support.training import step_losses


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
    return step_losses(config)


@pytest.mark.parametrize("attention", ["ring", "token_ring"])
def test_context_4_follows_the_context_1_loss_curve(attention):
    single, parallel = _losses(1), _losses(4, attention)
    assert len(single) == len(parallel) == 20
    np.testing.assert_allclose(parallel, single, rtol=0, atol=1e-4)  # fp32
    assert single[-1] < single[0] - 1.0  # a real curve (byte-level Python sources), not noise
