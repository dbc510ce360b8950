"""Model presets shared by the planner (operator) and the trainer: frozen `ModelConfig`s.

Pure data, no JAX: the operator imports this module to plan layouts, the trainer to build the
model, so both always agree on the dimensions of a preset. The llama3 and 1b/3b presets carry
the published Llama 3 / 3.1 / 3.2 dimensions and RoPE settings; tiny and 125m are ours.
"""

from __future__ import annotations

from .model import ModelConfig, RopeScaling

_ALL = (
    # Small enough to train on CPU in tests; byte-level vocabulary.
    ModelConfig(
        preset="tiny",
        layers=2,
        hidden=128,
        heads=8,
        kv_heads=2,
        ffn=384,
        vocab=256,
        tie_embeddings=True,
        rope_theta=10000.0,
    ),
    ModelConfig(
        preset="125m",
        layers=12,
        hidden=768,
        heads=12,
        kv_heads=4,
        ffn=2048,
        vocab=32000,
        tie_embeddings=True,
        rope_theta=10000.0,
    ),
    # Llama 3.2 1B and 3B (tied embeddings, RoPE scaled x32 as published).
    ModelConfig(
        preset="1b",
        layers=16,
        hidden=2048,
        heads=32,
        kv_heads=8,
        ffn=8192,
        vocab=128256,
        tie_embeddings=True,
        rope_scaling=RopeScaling(factor=32.0),
    ),
    ModelConfig(
        preset="3b",
        layers=28,
        hidden=3072,
        heads=24,
        kv_heads=8,
        ffn=8192,
        vocab=128256,
        tie_embeddings=True,
        rope_scaling=RopeScaling(factor=32.0),
    ),
    # Llama 3 8B and 70B as first published (plain RoPE; Llama 3.1's versions add
    # ropeScaling {factor: 8}), and Llama 3.1 405B (which only exists scaled).
    ModelConfig(preset="llama3-8b", layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    ModelConfig(preset="llama3-70b", layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256),
    ModelConfig(
        preset="llama3-405b",
        layers=126,
        hidden=16384,
        heads=128,
        kv_heads=8,
        ffn=53248,
        vocab=128256,
        rope_scaling=RopeScaling(factor=8.0),
    ),
)
PRESETS: dict[str, ModelConfig] = {m.preset: m for m in _ALL}


def preset(name: str) -> ModelConfig:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}") from None
