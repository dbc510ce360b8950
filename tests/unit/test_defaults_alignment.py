"""One default per setting: where the API, the trainer's config, the presets and the planner each
carry the same setting, their defaults agree. The choices themselves are one definition each
(the Literal types of longctx_trainer.contract.config, spelled in camelCase by the API)."""

import dataclasses
from typing import get_args

import pytest
from pydantic import BaseModel

from longctx_operator.api.spec import (
    TRAINER_ATTENTION,
    TRAINER_LOAD_BALANCE,
    CheckpointSpec,
    CommunicationSpec,
    DataSpec,
    Fp8Spec,
    LongContextJobSpec,
    MetricsSpec,
    OptimizerSpec,
    PackingSpec,
    ParallelismSpec,
)
from longctx_operator.planner import PlanRequest
from longctx_operator.planner.costs import dtype_bytes
from longctx_trainer.contract.config import (
    CheckpointConfig,
    DataConfig,
    Fp8Config,
    MetricsConfig,
    OptimizerConfig,
    PackingConfig,
    ParallelConfig,
    Precision,
    TrainerConfig,
)

# Each family: the places that carry it, the first one the API's where there is one.
FAMILIES = {
    "optimizer": (OptimizerSpec, OptimizerConfig),
    "parallelism": (ParallelismSpec, ParallelConfig, PlanRequest),
    "data": (DataSpec, DataConfig),
    "packing": (PackingSpec, PackingConfig),
    "checkpoint": (CheckpointSpec, CheckpointConfig),
    "metrics": (MetricsSpec, MetricsConfig),
    "fp8": (Fp8Spec, Fp8Config),
    "job": (LongContextJobSpec, TrainerConfig, PlanRequest),
}
# Defaults that differ on purpose.
DIFFERENT = {
    ("checkpoint", "path"): "the API's is a directory in the pod; the trainer alone may run without",
    ("parallelism", "load_balance"): "the API's auto is resolved per job (LongContextJobSpec.trainer_load_balance)",
}
# API spelling -> trainer spelling, where they differ.
SPELLINGS = {"attention": TRAINER_ATTENTION, "load_balance": TRAINER_LOAD_BALANCE}


def defaults(cls) -> dict:
    """Field -> default of a pydantic model or dataclass, for the fields that have a plain one
    (nested sections are families of their own; None means chosen elsewhere: preset, planner)."""
    if issubclass(cls, BaseModel):
        found = {name: f.get_default(call_default_factory=True) for name, f in cls.model_fields.items()}
    else:
        found = {f.name: f.default for f in dataclasses.fields(cls)}
    return {name: value for name, value in found.items() if isinstance(value, (bool, int, float, str))}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_setting_has_one_default(family):
    api, *rest = FAMILIES[family]
    carried: dict[str, dict[str, object]] = {}  # setting -> place -> default
    for name, value in defaults(api).items():
        if (family, name) not in DIFFERENT:
            carried.setdefault(name, {})[api.__name__] = SPELLINGS.get(name, {}).get(value, value)
    for cls in rest:
        for name, value in defaults(cls).items():
            if (family, name) not in DIFFERENT:
                carried.setdefault(name, {})[cls.__name__] = value
    shared = {name: places for name, places in carried.items() if len(places) > 1}
    assert shared, f"{family}: no setting carried twice"
    for name, places in shared.items():
        assert len(set(places.values())) == 1, f"{family}.{name}: {places}"


def test_the_collective_permute_default_is_the_trainers():
    assert CommunicationSpec().collective_permute == defaults(TrainerConfig)["communication"]


def test_every_precision_has_a_byte_width():
    assert [dtype_bytes(p) for p in get_args(Precision)] == [2, 4, 2]  # fp8 activations stay bf16
