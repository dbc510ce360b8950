"""Starting from a Hugging Face Llama checkpoint (trainer/weights.py).

The checkpoint is written with the official `safetensors` package in Hugging Face's layout and
names; the oracle is a numpy forward pass written the way transformers' LlamaModel computes
(x @ W.T, heads as view(heads, head_dim), rotate_half RoPE, repeat_kv), independent of the
trainer's einsum layout. Loaded into an 8-device mesh (data 2 x context 2 x tensor 2) the trainer's
model must give the same hidden states and loss (fp32, 2e-5 relative).
"""

import json
from functools import partial

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file

from longctx_trainer import model
from longctx_trainer.config import ParallelConfig
from longctx_trainer.mesh import make_mesh
from longctx_trainer.presets import ModelDims
from longctx_trainer.weights import SafetensorsDir, WeightsError, load_params

DIMS = ModelDims(layers=2, hidden=32, heads=4, kv_heads=2, ffn=48, vocab=64, rope_theta=10000.0)
HF_CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 32, "num_attention_heads": 4,
             "num_key_value_heads": 2, "intermediate_size": 48, "vocab_size": 64,
             "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False}


def hf_tensors(dims: ModelDims, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, D, F, V = dims.hidden, dims.head_dim, dims.ffn, dims.vocab

    def w(*shape):
        return (0.2 * rng.normal(size=shape)).astype(np.float32)

    out = {"model.embed_tokens.weight": w(V, H), "model.norm.weight": 1 + w(H), "lm_head.weight": w(V, H)}
    for i in range(dims.layers):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": 1 + w(H), p + "post_attention_layernorm.weight": 1 + w(H),
                p + "self_attn.q_proj.weight": w(dims.heads * D, H),
                p + "self_attn.k_proj.weight": w(dims.kv_heads * D, H),
                p + "self_attn.v_proj.weight": w(dims.kv_heads * D, H),
                p + "self_attn.o_proj.weight": w(H, dims.heads * D),
                p + "mlp.gate_proj.weight": w(F, H), p + "mlp.up_proj.weight": w(F, H),
                p + "mlp.down_proj.weight": w(H, F)}
    return out


def write_checkpoint(directory, tensors, config=HF_CONFIG):
    """Two shards, as published checkpoints come (model-00001-of-00002.safetensors, ...)."""
    names = sorted(tensors)
    half = len(names) // 2
    save_file({n: tensors[n] for n in names[:half]}, str(directory / "model-00001-of-00002.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(directory / "model-00002-of-00002.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def hf_forward(t: dict, tokens: np.ndarray, dims: ModelDims) -> np.ndarray:
    """Final normed hidden states [batch, seq, hidden], computed as transformers' LlamaModel does."""
    def rms(x, w):
        return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-5))

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return np.concatenate([-x2, x1], -1)

    b, s = tokens.shape
    D = dims.head_dim
    inv_freq = 1.0 / dims.rope_theta ** (np.arange(0, D, 2) / D)
    freqs = np.arange(s)[:, None] * inv_freq[None]
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[None, None], np.sin(emb)[None, None]  # [1, 1, s, D]
    x = t["model.embed_tokens.weight"][tokens].astype(np.float64)
    for i in range(dims.layers):
        p = f"model.layers.{i}."
        h = rms(x, t[p + "input_layernorm.weight"])
        q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(b, s, dims.heads, D).transpose(0, 2, 1, 3)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(b, s, dims.kv_heads, D).transpose(0, 2, 1, 3)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(b, s, dims.kv_heads, D).transpose(0, 2, 1, 3)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = dims.heads // dims.kv_heads
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # repeat_kv
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attn = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, dims.heads * D)
        x = x + attn @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"])
        gate, up = h @ t[p + "mlp.gate_proj.weight"].T, h @ t[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t[p + "mlp.down_proj.weight"].T
    return rms(x, t["model.norm.weight"])


def _mesh():
    return make_mesh(ParallelConfig(data=2, context=2, tensor=2), jax.devices()[:8])


OPTIONS = model.ModelOptions(compute_dtype=jnp.float32, remat=False, offload=False, chunk_tokens=None,
                             attention="ring", load_balance="dual_chunk_swap", loss_chunk_tokens=8)


def test_loaded_model_computes_what_the_hugging_face_model_computes(tmp_path):
    tensors = hf_tensors(DIMS)
    mesh = _mesh()
    params, notes = load_params(write_checkpoint(tmp_path, tensors), DIMS, model.param_shardings(DIMS, mesh))
    assert notes == []
    assert params["layers"]["wq"].sharding == model.param_shardings(DIMS, mesh)["layers"]["wq"]
    tokens = np.random.default_rng(1).integers(0, DIMS.vocab, (2, 16))
    targets = np.roll(tokens, -1, axis=1)
    hidden, permuted_targets = jax.jit(partial(model.final_hidden, dims=DIMS, mesh=mesh, options=OPTIONS))(
        params, tokens, targets)
    perm = model.permutation(16, 2, "dual_chunk_swap")
    expected = hf_forward(tensors, tokens, DIMS)
    np.testing.assert_allclose(np.asarray(hidden), expected[:, perm], rtol=2e-5, atol=2e-5)
    logits = expected @ tensors["lm_head.weight"].T.astype(np.float64)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    expected_loss = -np.mean(np.take_along_axis(logp, targets[..., None], -1))
    loss = jax.jit(partial(model.loss_fn, dims=DIMS, mesh=mesh, options=OPTIONS))(params, tokens, targets)
    np.testing.assert_allclose(float(loss), expected_loss, rtol=2e-5)


def test_tied_embeddings_and_bf16_files(tmp_path):
    """Llama 3.2 1B/3B tie the output projection to the embedding; most checkpoints are bf16."""
    dims = ModelDims(**{**DIMS.__dict__, "tie_embeddings": True})
    tensors = hf_tensors(dims, seed=2)
    del tensors["lm_head.weight"]
    bf16 = {n: a.astype(ml_dtypes.bfloat16) for n, a in tensors.items()}
    directory = write_checkpoint(tmp_path, bf16, {**HF_CONFIG, "tie_word_embeddings": True})
    params, _ = load_params(directory, dims, model.param_shardings(dims, _mesh()))
    assert "lm_head" not in params
    np.testing.assert_array_equal(np.asarray(params["embed"]),
                                  bf16["model.embed_tokens.weight"].astype(np.float32))
    wo = bf16["model.layers.1.self_attn.o_proj.weight"].astype(np.float32)  # [H, heads*D]
    np.testing.assert_array_equal(np.asarray(params["layers"]["wo"][1]),
                                  wo.reshape(dims.hidden, dims.heads, dims.head_dim).transpose(1, 2, 0))


def test_reader_agrees_with_the_official_library_on_every_tensor(tmp_path):
    from safetensors.numpy import load_file

    tensors = hf_tensors(DIMS)
    write_checkpoint(tmp_path, {n: a.astype(np.float16) for n, a in tensors.items()})
    ours = SafetensorsDir(tmp_path)
    official = load_file(str(tmp_path / "model-00001-of-00002.safetensors")) | load_file(
        str(tmp_path / "model-00002-of-00002.safetensors"))
    assert set(ours.tensors) == set(official)
    for name, array in official.items():
        np.testing.assert_array_equal(ours.array(name), array)


@pytest.mark.parametrize("change,needle", [
    ({"num_hidden_layers": 3}, "layers: the job's model has 2, the checkpoint 3"),
    ({"num_key_value_heads": 4}, "kv_heads: the job's model has 2, the checkpoint 4"),
    ({"rms_norm_eps": 1e-6}, "rms_norm_eps: the checkpoint uses 1e-06"),
    ({"model_type": "mistral"}, "only llama checkpoints"),
])
def test_a_checkpoint_of_another_model_is_refused_naming_the_difference(tmp_path, change, needle):
    write_checkpoint(tmp_path, hf_tensors(DIMS), {**HF_CONFIG, **change})
    with pytest.raises(WeightsError, match=needle):
        load_params(tmp_path, DIMS, model.param_shardings(DIMS, _mesh()))


def test_a_missing_tensor_or_directory_is_named(tmp_path):
    tensors = hf_tensors(DIMS)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    write_checkpoint(tmp_path, tensors)
    with pytest.raises(WeightsError, match="no tensor model.layers.1.mlp.up_proj.weight"):
        load_params(tmp_path, DIMS, model.param_shardings(DIMS, _mesh()))
    with pytest.raises(WeightsError, match="config.json: No such file"):
        load_params(tmp_path / "absent", DIMS, model.param_shardings(DIMS, _mesh()))


def test_rope_changes_for_context_extension_are_reported_not_refused(tmp_path):
    config = {**HF_CONFIG, "rope_theta": 500000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 32.0}}
    _, notes = load_params(write_checkpoint(tmp_path, hf_tensors(DIMS), config), DIMS,
                           model.param_shardings(DIMS, _mesh()))
    assert notes == ["rope_theta 10000 (the checkpoint was trained with 500000)",
                     "no rope_scaling (the checkpoint has {'rope_type': 'llama3', 'factor': 32.0})"]
