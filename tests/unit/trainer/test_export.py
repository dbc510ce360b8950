"""Writing Hugging Face Llama checkpoints (trainer/weights.py save_hf_checkpoint, trainer/export.py).

The files are read back with the official `safetensors` package where it can (fp32, f16) and by
the trainer's own reader for bf16; a trained checkpoint exported from a data 2 x context 2 x
tensor 2 run computes, in transformers' conventions (tests/support/hf_checkpoint.py), what the
trainer's model computes with the trained parameters.
"""

import json

import jax
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import load_file

from longctx_trainer import model
from longctx_trainer.checkpoint import Checkpoints
from longctx_trainer.contract.config import (
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.contract.model import RopeScaling
from longctx_trainer.export import ExportError, export_checkpoint
from longctx_trainer.mesh import make_mesh
from longctx_trainer.weights import SafetensorsDir, differences, load_params, save_hf_checkpoint
from support.hf_checkpoint import hf_config, hf_forward, hf_tensors, write_checkpoint
from support.tiny_model import model_options
from support.training import run

MODEL = ModelConfig(
    layers=2,
    hidden=32,
    heads=4,
    kv_heads=2,
    ffn=48,
    vocab=64,
    rope_theta=10000.0,
    rope_scaling=RopeScaling(factor=4.0, original_context=64),
)
OPTIONS = model_options(load_balance="none", loss_chunk_tokens=8)


def _one_device():
    return make_mesh(ParallelConfig(), jax.devices()[:1])


def _host(params):
    return jax.tree.map(np.asarray, params)


def test_load_then_save_gives_back_the_same_files_and_config(tmp_path):
    (tmp_path / "in").mkdir()
    tensors = hf_tensors(MODEL)
    write_checkpoint(tmp_path / "in", tensors, hf_config(MODEL))
    params, _ = load_params(tmp_path / "in", model.Model(MODEL, _one_device(), OPTIONS))
    [file] = save_hf_checkpoint(_host(params), MODEL, tmp_path / "out", dtype="float32", max_positions=4096)
    assert file.name == "model.safetensors"
    written = load_file(str(file))
    assert set(written) == set(tensors)
    for name, array in tensors.items():
        np.testing.assert_array_equal(written[name], array)
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert differences(MODEL, config) == ([], [])
    assert (config["architectures"], config["max_position_embeddings"], config["torch_dtype"]) == (
        ["LlamaForCausalLM"],
        4096,
        "float32",
    )
    assert config["rope_scaling"] == {
        "rope_type": "llama3",
        "factor": 4.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    }


def test_large_models_are_split_into_shards_with_an_index(tmp_path):
    (tmp_path / "in").mkdir()
    tensors = hf_tensors(MODEL)
    write_checkpoint(tmp_path / "in", tensors, hf_config(MODEL))
    params, _ = load_params(tmp_path / "in", model.Model(MODEL, _one_device(), OPTIONS))
    files = save_hf_checkpoint(
        _host(params), MODEL, tmp_path / "out", dtype="float16", max_positions=128, max_shard_bytes=8192
    )
    assert len(files) > 2 and files[0].name == f"model-00001-of-{len(files):05d}.safetensors"
    assert all(f.stat().st_size <= 8192 + 4096 for f in files)  # data within the limit, plus the header
    index = json.loads((tmp_path / "out" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(tensors)
    for name, array in tensors.items():
        shard = load_file(str(tmp_path / "out" / index["weight_map"][name]))
        np.testing.assert_array_equal(shard[name], array.astype(np.float16))


def test_bf16_export_reads_back_rounded(tmp_path):
    (tmp_path / "in").mkdir()
    tensors = hf_tensors(MODEL)
    write_checkpoint(tmp_path / "in", tensors, hf_config(MODEL))
    params, _ = load_params(tmp_path / "in", model.Model(MODEL, _one_device(), OPTIONS))
    save_hf_checkpoint(_host(params), MODEL, tmp_path / "out", max_positions=128)
    back = SafetensorsDir(tmp_path / "out")
    for name, array in tensors.items():
        np.testing.assert_array_equal(back.array(name), array.astype(ml_dtypes.bfloat16))


def _trained(tmp_path) -> TrainerConfig:
    config = TrainerConfig(
        model=MODEL,
        sequence_length=16,
        global_batch_tokens=32,
        steps=3,
        precision="fp32",
        parallelism=ParallelConfig(data=2, context=2, tensor=2),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=0),
        data=DataConfig(kind="synthetic", seed=1),
        checkpoint=CheckpointConfig(path=str(tmp_path / "ckpt"), interval_steps=2),
    )
    run(config)
    return config


def test_a_trained_checkpoint_exports_to_what_transformers_would_compute(tmp_path):
    config = _trained(tmp_path)
    step, [file] = export_checkpoint(config, tmp_path / "hf", dtype="float32")
    assert step == 3
    exported = load_file(str(file))
    mesh = make_mesh(config.parallelism)
    restored = Checkpoints(config.checkpoint)
    try:
        from longctx_trainer.train import StepFunctions

        state, _ = restored.restore(3, StepFunctions(config, mesh).abstract_state())
    finally:
        restored.close()
    tokens = np.random.default_rng(2).integers(0, 64, (2, 16))
    hidden, _ = jax.jit(model.Model(config.model, mesh, OPTIONS).final_hidden)(state["params"], tokens, tokens)
    np.testing.assert_allclose(np.asarray(hidden), hf_forward(exported, tokens, config.model), rtol=2e-5, atol=2e-5)
    step2, _ = export_checkpoint(config, tmp_path / "hf2", step=2)
    assert step2 == 2


def test_export_names_what_is_missing(tmp_path):
    config = _trained(tmp_path)
    with pytest.raises(ExportError, match="no checkpoint of step 1 in .*; there are 2, 3"):
        export_checkpoint(config, tmp_path / "hf", step=1)
    empty = config.model_copy(update={"checkpoint": CheckpointConfig(path=str(tmp_path / "none"))})
    with pytest.raises(ExportError, match="no checkpoint in"):
        export_checkpoint(empty, tmp_path / "hf")


def test_export_refuses_a_used_directory_and_keeps_the_starting_models_token_ids(tmp_path):
    from longctx_trainer.weights import WeightsError

    config = _trained(tmp_path)
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "model.safetensors").write_text("an earlier export")
    with pytest.raises(WeightsError, match="is not an empty directory"):
        export_checkpoint(config, tmp_path / "used")
    assert (tmp_path / "used" / "model.safetensors").read_text() == "an earlier export"
    start = tmp_path / "start"
    start.mkdir()
    (start / "config.json").write_text(json.dumps({"bos_token_id": 128000, "eos_token_id": 128001}))
    export_checkpoint(config.model_copy(update={"init_from": str(start)}), tmp_path / "hf")
    written = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert (written["bos_token_id"], written["eos_token_id"]) == (128000, 128001)


def test_token_ids_must_come_from_a_readable_checkpoint_before_anything_is_restored(tmp_path):
    config = _trained(tmp_path).model_copy(update={"init_from": str(tmp_path / "unmounted")})
    with pytest.raises(ExportError, match="unmounted/config.json, which cannot be read"):
        export_checkpoint(config, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    other = tmp_path / "tokenizer-source"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"eos_token_id": 7}))
    export_checkpoint(config, tmp_path / "hf", token_ids_from=other)
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["eos_token_id"] == 7
