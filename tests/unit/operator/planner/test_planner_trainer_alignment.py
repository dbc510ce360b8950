"""The planner's copies of the trainer's memory-relevant choices stay equal to the trainer's."""

import dataclasses

from longctx_operator.planner.costs import LOSS_CHUNK_TOKENS
from longctx_trainer.model import ModelOptions


def test_loss_chunk_matches_the_trainer_default():
    default = {f.name: f.default for f in dataclasses.fields(ModelOptions)}["loss_chunk_tokens"]
    assert LOSS_CHUNK_TOKENS == default
