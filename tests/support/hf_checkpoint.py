"""A Hugging Face Llama checkpoint for tests, and the forward pass transformers' LlamaModel computes.

The checkpoint is written with the official `safetensors` package in Hugging Face's layout and
names; `hf_forward` is numpy written the way transformers computes (x @ W.T, heads as
view(heads, head_dim), rotate_half RoPE, repeat_kv), independent of the trainer's einsum layout.
"""

import json

import numpy as np
from safetensors.numpy import save_file

from longctx_trainer.contract.model import ModelConfig

TRANSFORMERS_4, TRANSFORMERS_5 = "transformers-4", "transformers-5"


def hf_config(model: ModelConfig, layout: str = TRANSFORMERS_4) -> dict:
    """config.json as LlamaConfig.save_pretrained writes it. transformers 4: top-level rope_theta
    and, when scaled, rope_scaling; transformers 5: one rope_parameters dict that holds the theta
    and always names its rope_type ("default" without scaling), nothing at the top level."""
    config = {
        "model_type": "llama",
        "num_hidden_layers": model.layers,
        "hidden_size": model.hidden,
        "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads,
        "intermediate_size": model.ffn,
        "vocab_size": model.vocab,
        "rms_norm_eps": 1e-5,
        "tie_word_embeddings": model.tie_embeddings,
    }
    scaling = {}
    if model.rope_scaling:
        r = model.rope_scaling
        scaling = {
            "rope_type": "llama3",
            "factor": r.factor,
            "low_freq_factor": r.low_freq_factor,
            "high_freq_factor": r.high_freq_factor,
            "original_max_position_embeddings": r.original_context,
        }
    if layout == TRANSFORMERS_4:
        return (
            config
            | {"transformers_version": "4.57.1", "rope_theta": model.rope_theta}
            | ({"rope_scaling": scaling} if scaling else {})
        )
    assert layout == TRANSFORMERS_5, layout
    return config | {
        "transformers_version": "5.0.0",
        "rope_parameters": {"rope_type": "default", "rope_theta": model.rope_theta} | scaling,
    }


def hf_inv_freq(model: ModelConfig) -> np.ndarray:
    """inv_freq as transformers computes it, with its llama3 rope_scaling when the model has one."""
    D = model.head_dim
    inv_freq = 1.0 / model.rope_theta ** (np.arange(0, D, 2) / D)
    if model.rope_scaling is None:
        return inv_freq
    r = model.rope_scaling
    low_freq_wavelen = r.original_context / r.low_freq_factor
    high_freq_wavelen = r.original_context / r.high_freq_factor
    wavelen = 2 * np.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / r.factor, inv_freq)
    smooth = (r.original_context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / r.factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama)


def hf_tensors(model: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    H, D, F, V = model.hidden, model.head_dim, model.ffn, model.vocab

    def w(*shape):
        return (0.2 * rng.normal(size=shape)).astype(np.float32)

    out = {"model.embed_tokens.weight": w(V, H), "model.norm.weight": 1 + w(H), "lm_head.weight": w(V, H)}
    for i in range(model.layers):
        p = f"model.layers.{i}."
        out |= {
            p + "input_layernorm.weight": 1 + w(H),
            p + "post_attention_layernorm.weight": 1 + w(H),
            p + "self_attn.q_proj.weight": w(model.heads * D, H),
            p + "self_attn.k_proj.weight": w(model.kv_heads * D, H),
            p + "self_attn.v_proj.weight": w(model.kv_heads * D, H),
            p + "self_attn.o_proj.weight": w(H, model.heads * D),
            p + "mlp.gate_proj.weight": w(F, H),
            p + "mlp.up_proj.weight": w(F, H),
            p + "mlp.down_proj.weight": w(H, F),
        }
    return out


def write_checkpoint(directory, tensors, config: dict):
    """Two shards, as published checkpoints come (model-00001-of-00002.safetensors, ...)."""
    names = sorted(tensors)
    half = len(names) // 2
    save_file({n: tensors[n] for n in names[:half]}, str(directory / "model-00001-of-00002.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(directory / "model-00002-of-00002.safetensors"))
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def hf_forward(t: dict, tokens: np.ndarray, model: ModelConfig) -> np.ndarray:
    """Final normed hidden states [batch, seq, hidden], computed as transformers' LlamaModel does."""

    def rms(x, w):
        return w * (x / np.sqrt(np.mean(x * x, -1, keepdims=True) + 1e-5))

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2 :]
        return np.concatenate([-x2, x1], -1)

    b, s = tokens.shape
    D = model.head_dim
    freqs = np.arange(s)[:, None] * hf_inv_freq(model)[None]
    emb = np.concatenate([freqs, freqs], -1)
    cos, sin = np.cos(emb)[None, None], np.sin(emb)[None, None]  # [1, 1, s, D]
    x = t["model.embed_tokens.weight"][tokens].astype(np.float64)
    for i in range(model.layers):
        p = f"model.layers.{i}."
        h = rms(x, t[p + "input_layernorm.weight"])
        q = (h @ t[p + "self_attn.q_proj.weight"].T).reshape(b, s, model.heads, D).transpose(0, 2, 1, 3)
        k = (h @ t[p + "self_attn.k_proj.weight"].T).reshape(b, s, model.kv_heads, D).transpose(0, 2, 1, 3)
        v = (h @ t[p + "self_attn.v_proj.weight"].T).reshape(b, s, model.kv_heads, D).transpose(0, 2, 1, 3)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        group = model.heads // model.kv_heads
        k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)  # repeat_kv
        scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(D)
        scores = np.where(np.tril(np.ones((s, s), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        attn = (weights @ v).transpose(0, 2, 1, 3).reshape(b, s, model.heads * D)
        x = x + attn @ t[p + "self_attn.o_proj.weight"].T
        h = rms(x, t[p + "post_attention_layernorm.weight"])
        gate, up = h @ t[p + "mlp.gate_proj.weight"].T, h @ t[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ t[p + "mlp.down_proj.weight"].T
    return rms(x, t["model.norm.weight"])


def hf_loss(tensors: dict, tokens: np.ndarray, targets: np.ndarray, model: ModelConfig) -> float:
    """Mean next-token cross-entropy of the Hugging Face model (tied head when lm_head is absent)."""
    head = tensors.get("lm_head.weight", tensors["model.embed_tokens.weight"]).astype(np.float64)
    logits = hf_forward(tensors, tokens, model) @ head.T
    top = logits.max(-1, keepdims=True)
    logp = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    return float(-np.mean(np.take_along_axis(logp, targets[..., None], -1)))
