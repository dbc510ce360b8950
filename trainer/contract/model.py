"""The one description of a model: `ModelConfig`, shared by the API's translation, the planner,
the presets (presets.py) and both trainers.

Pure data, no JAX: the operator imports this module to plan layouts, the trainers to build the
model, so every part reads the same dimensions, RoPE settings and parameter counts. Each default
is declared here once.
"""

from __future__ import annotations

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
    one description of it: presets, ModelConfig and the model all hold this type."""

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


class ModelConfig(BaseModel):
    """A Llama-style decoder (RMSNorm, RoPE, GQA, SwiGLU): its dimensions and RoPE settings, with a
    preset's name where it came from one (presets.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: str | None = Field(None, description="Preset the dimensions came from, if any.")
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    ffn: int = Field(gt=0)
    vocab: int = Field(gt=0)
    tie_embeddings: bool = False
    rope_theta: float = Field(ROPE_THETA, gt=0)
    rope_scaling: RopeScaling | None = None

    @model_validator(mode="after")
    def _check_heads(self) -> ModelConfig:
        if self.hidden % self.heads:
            raise ValueError("hidden must be divisible by heads")
        if self.heads % self.kv_heads:
            raise ValueError("heads must be divisible by kv_heads")
        return self

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
