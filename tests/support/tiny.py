"""The tiny model of the trainers' tests: 2 layers, 64 wide, 4 heads over 2 K/V heads, byte vocab.
Small enough that a few training steps on CPU take seconds, large enough that its loss curve
shows learning on byte-level text."""

from __future__ import annotations

from longctx_trainer.contract.config import ModelConfig, TrainerConfig

TINY_MODEL = ModelConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256)
TINY_SEQUENCE = 64


def tiny_trainer_config(**changes) -> TrainerConfig:
    """A fp32 TrainerConfig of TINY_MODEL over TINY_SEQUENCE-token sequences, with `changes`."""
    return TrainerConfig(**{"model": TINY_MODEL, "sequence_length": TINY_SEQUENCE, "precision": "fp32", **changes})
