"""trainer/contract/presets.py: every preset is a frozen instance of the trainer's ModelConfig,
named once."""

import pytest
from pydantic import ValidationError

from longctx_trainer.contract.config import TrainerConfig
from longctx_trainer.contract.model import ModelConfig
from longctx_trainer.contract.presets import PRESETS, preset


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_a_preset_is_the_trainer_configs_model_as_it_is(name):
    model = preset(name)
    assert type(model) is ModelConfig and model.preset == name
    config = TrainerConfig(model=model, sequence_length=64, global_batch_tokens=64, steps=1)
    assert config.model == model  # no conversion on the way into the trainer's config
    with pytest.raises(ValidationError, match="frozen"):
        model.layers = 1


def test_an_unknown_preset_is_named_with_the_known_ones():
    with pytest.raises(KeyError, match="unknown model preset 'llama9'; known: tiny, 125m"):
        preset("llama9")
