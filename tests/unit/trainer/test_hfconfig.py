"""config.json of a Hugging Face Llama checkpoint (trainer/hfconfig.py): either transformers layout
in, the transformers 4 layout out. Loading whole checkpoints of each layout: test_weights.py."""

import json

import pytest

from longctx_trainer import hfconfig
from longctx_trainer.contract.model import ModelConfig, RopeScaling
from support.hf_checkpoint import TRANSFORMERS_4, TRANSFORMERS_5, hf_config

LLAMA31 = ModelConfig(
    layers=2,
    hidden=32,
    heads=4,
    kv_heads=2,
    ffn=48,
    vocab=64,
    rope_theta=500000.0,
    rope_scaling=RopeScaling(factor=8.0),
)


@pytest.mark.parametrize("layout", [TRANSFORMERS_4, TRANSFORMERS_5])
def test_either_layout_gives_the_same_model(layout):
    config = hf_config(LLAMA31, layout)
    assert ("rope_parameters" in config) == (layout == TRANSFORMERS_5)
    rope = hfconfig.rope(config)
    assert (rope.theta, rope.scaling, rope.implemented) == (500000.0, LLAMA31.rope_scaling, True)
    assert hfconfig.dims(config) == {
        name: getattr(LLAMA31, name) for name in ("layers", "hidden", "heads", "kv_heads", "head_dim", "ffn", "vocab")
    } | {"tie_embeddings": False}
    unscaled = hfconfig.rope(hf_config(LLAMA31.model_copy(update={"rope_scaling": None}), layout))
    assert (unscaled.theta, unscaled.kind, unscaled.parameters, unscaled.scaling) == (500000.0, "default", None, None)


@pytest.mark.parametrize(
    "config,theta",
    [
        ({}, 10000.0),  # nothing said: transformers' default
        ({"rope_theta": 250000.0}, 250000.0),
        ({"rope_parameters": {"rope_type": "default"}}, 10000.0),  # transformers 5 may leave the theta out
        ({"rope_theta": 250000.0, "rope_parameters": {"rope_type": "default"}}, 250000.0),
        ({"rope_theta": 1.0, "rope_parameters": {"rope_type": "default", "rope_theta": 250000.0}}, 250000.0),
    ],
)
def test_the_theta_is_the_rope_dicts_then_the_top_levels_then_10000(config, theta):
    assert hfconfig.rope(config).theta == theta


def test_llama3_scaling_read_as_transformers_5_standardizes_it():
    """The older `type` key names the type; a missing original context is max_position_embeddings."""
    config = {"max_position_embeddings": 4096, "rope_parameters": {"type": "llama3", "factor": 4.0}}
    assert hfconfig.rope(config).scaling == RopeScaling(factor=4.0, original_context=4096)


def test_a_scaling_band_upside_down_is_named():
    band = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0}
    with pytest.raises(hfconfig.HfConfigError, match="rope_scaling: .*high_freq_factor must be above low_freq_factor"):
        hfconfig.rope({"rope_scaling": band})


def test_another_scaling_type_is_kept_for_the_message_but_not_implemented():
    rope = hfconfig.rope({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0}})
    assert (rope.theta, rope.parameters, rope.scaling, rope.implemented) == (
        1e6,
        {"rope_type": "yarn", "factor": 4.0},
        None,
        False,
    )


def test_rope_per_layer_type_is_not_a_llama_checkpoint():
    per_layer = {"full_attention": {"rope_type": "default", "rope_theta": 1e6}, "sliding_attention": {}}
    with pytest.raises(hfconfig.HfConfigError, match="RoPE set per layer type"):
        hfconfig.rope({"rope_parameters": per_layer})


def test_written_config_is_the_transformers_4_layout_and_reads_back(tmp_path):
    """transformers 4 ignores rope_parameters (it would run theta 10000); transformers 5 reads both."""
    config = hfconfig.write(
        LLAMA31, max_positions=65536, dtype="bfloat16", rms_norm_eps=1e-5, token_ids={"eos_token_id": 128001}
    )
    assert "rope_parameters" not in config
    assert (config["rope_theta"], config["rope_scaling"]["rope_type"], config["eos_token_id"]) == (
        500000.0,
        "llama3",
        128001,
    )
    (tmp_path / hfconfig.FILE).write_text(json.dumps(config))
    back = hfconfig.read(tmp_path)
    assert hfconfig.rope(back).scaling == LLAMA31.rope_scaling and hfconfig.rope(back).theta == 500000.0
    assert hfconfig.dims(back)["vocab"] == 64 and hfconfig.token_ids(back) == {"eos_token_id": 128001}


def test_unreadable_or_incomplete_configs_are_named(tmp_path):
    with pytest.raises(hfconfig.HfConfigError, match="config.json: No such file"):
        hfconfig.read(tmp_path)
    (tmp_path / hfconfig.FILE).write_text("[1]")
    with pytest.raises(hfconfig.HfConfigError, match="not a JSON object"):
        hfconfig.read(tmp_path)
    with pytest.raises(hfconfig.HfConfigError, match="has no vocab_size"):
        hfconfig.vocab({"hidden_size": 8})
    with pytest.raises(hfconfig.HfConfigError, match="has no intermediate_size"):
        hfconfig.dims({"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1})
