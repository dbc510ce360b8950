"""The API's model description as the trainer's `ModelConfig`: the one translation, used by the
planner request (its dimensions) and by the rendered trainer config."""

from __future__ import annotations

from longctx_trainer.contract.config import ModelConfig
from longctx_trainer.contract.presets import RopeScaling

from .api.spec import ModelSpec


def model_config(model: ModelSpec) -> ModelConfig:
    rope = {}  # what the spec sets; the rest is the preset's (or the defaults)
    if model.rope_scaling:
        rope["rope_scaling"] = RopeScaling(**model.rope_scaling.model_dump())
    if model.rope_theta:
        rope["rope_theta"] = model.rope_theta
    if model.preset:
        return ModelConfig.from_preset(model.preset).model_copy(update=rope)
    return ModelConfig(
        layers=model.layers,
        hidden=model.hidden,
        heads=model.heads,
        kv_heads=model.kv_heads,
        ffn=model.ffn,
        vocab=model.vocab,
        tie_embeddings=bool(model.tie_embeddings),
        **rope,
    )
