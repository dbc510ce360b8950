"""Starting from a Hugging Face Llama checkpoint (trainer/weights.py).

The checkpoint and the oracle (a numpy forward pass in transformers' conventions, independent of
the trainer's einsum layout) come from tests/support/hf_checkpoint.py. Loaded into an 8-device mesh
(data 2 x context 2 x tensor 2) the trainer's model must give the same hidden states and loss (fp32, 2e-5 relative).
"""

import jax
import ml_dtypes
import numpy as np
import pytest

from longctx_trainer import model
from longctx_trainer.contract.config import ParallelConfig
from longctx_trainer.contract.model import ModelConfig, RopeScaling
from longctx_trainer.mesh import make_mesh
from longctx_trainer.weights import SafetensorsDir, WeightsError, load_params
from support.hf_checkpoint import (
    TRANSFORMERS_4,
    TRANSFORMERS_5,
    hf_config,
    hf_forward,
    hf_inv_freq,
    hf_loss,
    hf_tensors,
    write_checkpoint,
)
from support.tiny_model import model_options

MODEL = ModelConfig(layers=2, hidden=32, heads=4, kv_heads=2, ffn=48, vocab=64, rope_theta=10000.0)
HF_CONFIG = hf_config(MODEL)


def _mesh():
    return make_mesh(ParallelConfig(data=2, context=2, tensor=2), jax.devices()[:8])


OPTIONS = model_options(loss_chunk_tokens=8)


def _model(config: ModelConfig = MODEL) -> model.Model:
    return model.Model(config, _mesh(), OPTIONS)


def test_loaded_model_computes_what_the_hugging_face_model_computes(tmp_path):
    tensors = hf_tensors(MODEL)
    loaded = _model()
    params, notes = load_params(write_checkpoint(tmp_path, tensors, HF_CONFIG), loaded)
    assert notes == []
    assert params["layers"]["wq"].sharding == loaded.param_shardings()["layers"]["wq"]
    tokens = np.random.default_rng(1).integers(0, MODEL.vocab, (2, 16))
    targets = np.roll(tokens, -1, axis=1)
    hidden, permuted_targets = jax.jit(loaded.final_hidden)(params, tokens, targets)
    perm = model.permutation(16, 2, "dual_chunk_swap")
    expected = hf_forward(tensors, tokens, MODEL)
    np.testing.assert_allclose(np.asarray(hidden), expected[:, perm], rtol=2e-5, atol=2e-5)
    expected_loss = hf_loss(tensors, tokens, targets, MODEL)
    loss = jax.jit(loaded.loss)(params, tokens, targets)
    np.testing.assert_allclose(float(loss), expected_loss, rtol=2e-5)


def test_tied_embeddings_and_bf16_files(tmp_path):
    """Llama 3.2 1B/3B tie the output projection to the embedding; most checkpoints are bf16."""
    tied = MODEL.model_copy(update={"tie_embeddings": True})
    tensors = hf_tensors(tied, seed=2)
    del tensors["lm_head.weight"]
    bf16 = {n: a.astype(ml_dtypes.bfloat16) for n, a in tensors.items()}
    directory = write_checkpoint(tmp_path, bf16, {**HF_CONFIG, "tie_word_embeddings": True})
    params, _ = load_params(directory, _model(tied))
    assert "lm_head" not in params
    np.testing.assert_array_equal(np.asarray(params["embed"]), bf16["model.embed_tokens.weight"].astype(np.float32))
    wo = bf16["model.layers.1.self_attn.o_proj.weight"].astype(np.float32)  # [H, heads*D]
    np.testing.assert_array_equal(
        np.asarray(params["layers"]["wo"][1]), wo.reshape(tied.hidden, tied.heads, tied.head_dim).transpose(1, 2, 0)
    )


def test_reader_agrees_with_the_official_library_on_every_tensor(tmp_path):
    from safetensors.numpy import load_file

    tensors = hf_tensors(MODEL)
    write_checkpoint(tmp_path, {n: a.astype(np.float16) for n, a in tensors.items()}, HF_CONFIG)
    ours = SafetensorsDir(tmp_path)
    official = load_file(str(tmp_path / "model-00001-of-00002.safetensors")) | load_file(
        str(tmp_path / "model-00002-of-00002.safetensors")
    )
    assert set(ours.tensors) == set(official)
    for name, array in official.items():
        np.testing.assert_array_equal(ours.array(name), array)


@pytest.mark.parametrize(
    "change,needle",
    [
        ({"num_hidden_layers": 3}, "layers: the job's model has 2, the checkpoint 3"),
        ({"num_key_value_heads": 4}, "kv_heads: the job's model has 2, the checkpoint 4"),
        ({"rms_norm_eps": 1e-6}, "rms_norm_eps: the checkpoint uses 1e-06"),
        ({"model_type": "mistral"}, "only llama checkpoints"),
    ],
)
def test_a_checkpoint_of_another_model_is_refused_naming_the_difference(tmp_path, change, needle):
    write_checkpoint(tmp_path, hf_tensors(MODEL), {**HF_CONFIG, **change})
    with pytest.raises(WeightsError, match=needle):
        load_params(tmp_path, _model())


def test_a_missing_tensor_or_directory_is_named(tmp_path):
    tensors = hf_tensors(MODEL)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    write_checkpoint(tmp_path, tensors, HF_CONFIG)
    with pytest.raises(WeightsError, match="no tensor model.layers.1.mlp.up_proj.weight"):
        load_params(tmp_path, _model())
    with pytest.raises(WeightsError, match="config.json: No such file"):
        load_params(tmp_path / "absent", _model())


@pytest.mark.parametrize("layout", [TRANSFORMERS_4, TRANSFORMERS_5])
def test_rope_changes_for_context_extension_are_reported_not_refused(tmp_path, layout):
    """The job (theta 1e4, no scaling) against a Llama 3.1-style checkpoint: the same two notes
    whichever transformers saved its config.json."""
    published = MODEL.model_copy(update={"rope_theta": 500000.0, "rope_scaling": RopeScaling(factor=32.0)})
    _, notes = load_params(write_checkpoint(tmp_path, hf_tensors(MODEL), hf_config(published, layout)), _model())
    assert notes == [
        "rope_theta 10000 (the checkpoint was trained with 500000)",
        "no rope_scaling (the checkpoint has {'rope_type': 'llama3', 'factor': 32.0, 'low_freq_factor': 1.0, "
        "'high_freq_factor': 4.0, 'original_max_position_embeddings': 8192})",
    ]


def test_a_scaling_type_not_implemented_is_reported(tmp_path):
    _, notes = load_params(
        write_checkpoint(tmp_path, hf_tensors(MODEL), {**HF_CONFIG, "rope_scaling": {"type": "yarn", "factor": 4.0}}),
        _model(),
    )
    assert notes == ["no rope_scaling (the checkpoint has {'type': 'yarn', 'factor': 4.0})"]


@pytest.mark.parametrize("layout", [TRANSFORMERS_4, TRANSFORMERS_5])
def test_llama31_rope_scaling_is_the_hugging_face_one(tmp_path, layout):
    """A Llama 3.1-style checkpoint (llama3 RoPE scaling), its config.json saved by transformers 4
    or 5, loads without notes and computes the same hidden states as transformers with that
    scaling. Head dim 8, theta 1e4, original context 64: the four frequencies make 10.2, 1.02, 0.10
    and 0.01 turns in it, one kept, one interpolated, two stretched."""
    scaled = MODEL.model_copy(update={"rope_scaling": RopeScaling(factor=8.0, original_context=64)})
    assert not np.allclose(hf_inv_freq(scaled), hf_inv_freq(MODEL))
    np.testing.assert_allclose(
        np.asarray(model.rope_frequencies(MODEL.head_dim, MODEL.rope_theta, scaled.rope_scaling)),
        hf_inv_freq(scaled),
        rtol=1e-6,
    )
    tensors = hf_tensors(scaled, seed=6)
    loaded = _model(scaled)
    params, notes = load_params(write_checkpoint(tmp_path, tensors, hf_config(scaled, layout)), loaded)
    assert notes == []
    tokens = np.random.default_rng(7).integers(0, MODEL.vocab, (2, 16))
    hidden, _ = jax.jit(loaded.final_hidden)(params, tokens, tokens)
    perm = model.permutation(16, 2, "dual_chunk_swap")
    np.testing.assert_allclose(np.asarray(hidden), hf_forward(tensors, tokens, scaled)[:, perm], rtol=2e-5, atol=2e-5)


def test_training_starts_from_the_checkpoint_and_not_from_random_weights(tmp_path):
    from longctx_trainer.contract.config import DataConfig, ParallelConfig, TrainerConfig
    from longctx_trainer.contract.metrics import TrainMetrics
    from longctx_trainer.data import Batches
    from longctx_trainer.train import train

    tensors = hf_tensors(MODEL, seed=3)
    config = TrainerConfig(
        model=MODEL,
        sequence_length=16,
        global_batch_tokens=32,
        steps=1,
        precision="fp32",
        parallelism=ParallelConfig(data=2, context=2, tensor=2),
        data=DataConfig(kind="synthetic", seed=5),
        init_from=str(write_checkpoint(tmp_path, tensors, HF_CONFIG)),
    )
    mesh = _mesh()
    events = []
    train(config, mesh, emit=events.append, metrics=TrainMetrics("test", 0), peak_flops_per_device=1e12)
    init = next(e for e in events if e["event"] == "init")
    assert (init["from"], init["notes"]) == (str(tmp_path), [])
    tokens, targets = (np.asarray(a) for a in Batches(config, mesh).for_step(0)[:2])
    expected = hf_loss(tensors, tokens, targets, MODEL)
    step = next(e for e in events if e["event"] == "step")
    np.testing.assert_allclose(step["loss"], expected, rtol=2e-5)  # the loss of step 1's batch


def test_broken_files_are_named_not_tracebacks(tmp_path):
    """A Git LFS pointer instead of the weights, a file cut short, a config whose head_dim differs."""
    tensors = hf_tensors(MODEL)
    write_checkpoint(tmp_path, tensors, HF_CONFIG)
    shard = tmp_path / "model-00002-of-00002.safetensors"
    data = shard.read_bytes()
    shard.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:abc\nsize 123\n")
    with pytest.raises(WeightsError, match="not a safetensors file"):
        load_params(tmp_path, _model())
    shard.write_bytes(data[:-100])
    with pytest.raises(WeightsError, match="beyond the end of the file"):
        load_params(tmp_path, _model())
    shard.write_bytes(data)
    write_checkpoint(tmp_path, tensors, {**HF_CONFIG, "head_dim": 16})
    with pytest.raises(WeightsError, match="head_dim: the job's model has 8, the checkpoint 16"):
        load_params(tmp_path, _model())


def test_a_tensor_of_the_wrong_shape_is_named_before_any_reshape(tmp_path):
    tensors = hf_tensors(MODEL)
    tensors["model.layers.0.self_attn.k_proj.weight"] = tensors["model.layers.0.self_attn.q_proj.weight"]
    write_checkpoint(tmp_path, tensors, HF_CONFIG)
    with pytest.raises(WeightsError, match=r"k_proj.weight has shape \[32, 32\], the model needs \[16, 32\]"):
        load_params(tmp_path, _model())


def test_an_index_decides_which_files_belong_to_the_checkpoint(tmp_path):
    """Leftovers of another save in the same directory are not read when an index names the files."""
    import json

    from safetensors.numpy import save_file

    tensors = hf_tensors(MODEL)
    write_checkpoint(tmp_path, tensors, HF_CONFIG)
    stale = {name: np.zeros_like(array) for name, array in tensors.items()}
    save_file(stale, str(tmp_path / "model.safetensors"))  # sorts after the real shards: would win
    names = sorted(tensors)
    half = len(names) // 2
    weight_map = {n: "model-00001-of-00002.safetensors" for n in names[:half]}
    weight_map |= {n: "model-00002-of-00002.safetensors" for n in names[half:]}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    params, _ = load_params(tmp_path, _model())
    np.testing.assert_array_equal(np.asarray(params["embed"]), tensors["model.embed_tokens.weight"])


def test_an_index_naming_a_missing_shard_or_a_malformed_header_is_named(tmp_path):
    import json
    import struct

    write_checkpoint(tmp_path, hf_tensors(MODEL), HF_CONFIG)
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps(
            {
                "weight_map": {
                    "model.norm.weight": "model-00001-of-00002.safetensors",
                    "lm_head.weight": "model-00003.safetensors",
                }
            }
        )
    )
    with pytest.raises(WeightsError, match="names files that are not there: model-00003.safetensors"):
        load_params(tmp_path, _model())
    (tmp_path / "model.safetensors.index.json").unlink()
    header = json.dumps({"x": {"dtype": "F32", "data_offsets": [0]}}).encode()
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(WeightsError, match="tensor x has a malformed header entry"):
        load_params(tmp_path, _model())
