"""The API's model description as the trainer's `ModelConfig`: the one translation, used by the
planner request (its dimensions) and by the rendered trainer config."""

from __future__ import annotations

from longctx_trainer.contract.model import ModelConfig, RopeScaling
from longctx_trainer.contract.presets import preset

from .api.spec import ModelSpec


def model_config(model: ModelSpec) -> ModelConfig:
    rope = {}  # what the spec sets; the rest is the preset's (or the defaults)
    if model.rope_scaling:
        rope["rope_scaling"] = RopeScaling(**model.rope_scaling.model_dump())
    if model.rope_theta:
        rope["rope_theta"] = model.rope_theta
    if model.preset:
        return preset(model.preset).model_copy(update=rope)
    # explicit dimensions: what the spec leaves unset (tie_embeddings) is ModelConfig's default
    dims = model.model_dump(exclude_none=True, exclude={"preset", "rope_theta", "rope_scaling"})
    return ModelConfig(**dims, **rope)
