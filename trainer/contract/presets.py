"""Model presets shared by the planner (operator) and the trainer.

Pure data, no JAX: the operator imports this module to plan layouts, the trainer to build the
model, so both always agree on the dimensions of a preset. The llama3 and 1b/3b presets carry
the published Llama 3 / 3.1 / 3.2 dimensions and RoPE settings; tiny and 125m are ours.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, model_validator

RMS_NORM_EPS = 1e-5
"""Llama 3's RMSNorm epsilon: the JAX model, the PyTorch example and Hugging Face export share it."""
ROPE_THETA = 500000.0
"""Llama 3's RoPE base frequency: the default of explicit dimensions."""
# Llama 3.1's RoPE scaling band, the defaults of RopeScaling and of the API's ropeScaling.
ROPE_LOW_FREQ_FACTOR = 1.0
ROPE_HIGH_FREQ_FACTOR = 4.0
ROPE_ORIGINAL_CONTEXT = 8192


class RopeScaling(BaseModel):
    """Llama 3.1's RoPE frequency scaling ("rope_type": "llama3" in Hugging Face configs): long
    wavelengths are stretched by `factor`, short ones kept, the band between interpolated. The
    one description of it: presets, the trainer's ModelConfig and the model all hold this type."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    factor: float = Field(gt=0)
    low_freq_factor: float = Field(ROPE_LOW_FREQ_FACTOR, gt=0)
    high_freq_factor: float = Field(ROPE_HIGH_FREQ_FACTOR, gt=0)
    original_context: int = Field(ROPE_ORIGINAL_CONTEXT, gt=0)  # original_max_position_embeddings

    @model_validator(mode="after")
    def _check_band(self) -> RopeScaling:
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("rope_scaling.high_freq_factor must be above low_freq_factor")
        return self


@dataclass(frozen=True)
class ModelDims:
    """Dimensions of a Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    tie_embeddings: bool = False
    rope_theta: float = ROPE_THETA
    rope_scaling: RopeScaling | None = None

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def attention_params_per_layer(self) -> int:
        q_and_o = 2 * self.hidden * self.heads * self.head_dim
        k_and_v = 2 * self.hidden * self.kv_heads * self.head_dim
        return q_and_o + k_and_v

    def mlp_params_per_layer(self) -> int:
        return 3 * self.hidden * self.ffn  # gate, up, down

    def params_per_layer(self) -> int:
        return self.attention_params_per_layer() + self.mlp_params_per_layer() + 2 * self.hidden

    def embedding_params(self) -> int:
        tables = 1 if self.tie_embeddings else 2
        return tables * self.vocab * self.hidden

    def param_count(self) -> int:
        """Exact parameter count: embeddings (+ untied LM head), layers, final norm."""
        return self.embedding_params() + self.layers * self.params_per_layer() + self.hidden

    def non_embedding_param_count(self) -> int:
        return self.layers * self.params_per_layer() + self.hidden


PRESETS: dict[str, ModelDims] = {
    # Small enough to train on CPU in tests; byte-level vocabulary.
    "tiny": ModelDims(
        layers=2, hidden=128, heads=8, kv_heads=2, ffn=384, vocab=256, tie_embeddings=True, rope_theta=10000.0
    ),
    "125m": ModelDims(
        layers=12, hidden=768, heads=12, kv_heads=4, ffn=2048, vocab=32000, tie_embeddings=True, rope_theta=10000.0
    ),
    # Llama 3.2 1B and 3B (tied embeddings, RoPE scaled x32 as published).
    "1b": ModelDims(
        layers=16,
        hidden=2048,
        heads=32,
        kv_heads=8,
        ffn=8192,
        vocab=128256,
        tie_embeddings=True,
        rope_scaling=RopeScaling(factor=32.0),
    ),
    "3b": ModelDims(
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
    "llama3-8b": ModelDims(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    "llama3-70b": ModelDims(layers=80, hidden=8192, heads=64, kv_heads=8, ffn=28672, vocab=128256),
    "llama3-405b": ModelDims(
        layers=126, hidden=16384, heads=128, kv_heads=8, ffn=53248, vocab=128256, rope_scaling=RopeScaling(factor=8.0)
    ),
}


def preset(name: str) -> ModelDims:
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; known: {', '.join(PRESETS)}") from None
