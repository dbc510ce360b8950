"""TrainerConfig's layout checks for the attention kinds: what the trainer refuses before it starts."""

import pytest
from pydantic import ValidationError

from longctx_trainer.contract.config import ModelConfig, ParallelConfig, TrainerConfig

MODEL = ModelConfig(layers=1, hidden=64, heads=8, kv_heads=2, ffn=128, vocab=256)


def config(**parallel) -> TrainerConfig:
    return TrainerConfig(
        model=MODEL, sequence_length=256, global_batch_tokens=256, steps=1, parallelism=ParallelConfig(**parallel)
    )


@pytest.mark.parametrize(
    "parallel",
    [
        dict(context=8, attention="ulysses"),  # 8 heads over 8, 2 K/V heads repeated 4 times
        dict(context=4, tensor=2, attention="ulysses"),
        dict(context=8, attention="hybrid", ulysses=2),
        dict(context=8, attention="hybrid", ulysses=4),
    ],
)
def test_layouts_the_heads_allow(parallel):
    assert config(**parallel).parallelism.attention == parallel["attention"]


@pytest.mark.parametrize(
    "parallel,message",
    [
        (
            dict(context=16, attention="ulysses"),
            "heads per tensor rank \\(8\\) divisible by its degree \\(16 devices\\)",
        ),
        (dict(context=8, tensor=2, attention="ulysses"), "heads per tensor rank \\(4\\)"),
        (dict(context=8, attention="hybrid", ulysses=8), "between 1 and context"),
        (dict(context=8, attention="hybrid", ulysses=3), "between 1 and context"),
        (dict(context=8, attention="hybrid"), "between 1 and context"),
        (dict(context=8, attention="ring", ulysses=2), "applies to attention hybrid only"),
    ],
)
def test_layouts_refused_with_the_rule(parallel, message):
    with pytest.raises(ValidationError, match=message):
        config(**parallel)
