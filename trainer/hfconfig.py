"""A Hugging Face Llama checkpoint's config.json: the one place its keys are read and written.

Plain JSON and the model dimensions, no JAX: `longctx tokenize` reads the vocabulary here too.

RoPE is stored two ways. transformers 4 writes top-level `rope_theta` and, for a scaled model,
`rope_scaling` ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": ..., ...}).
transformers 5 writes one `rope_parameters` dict that holds the theta as well and always names its
type ({"rope_type": "default", "rope_theta": 500000.0} without scaling), and no top-level
`rope_theta` or `rope_scaling`. `rope` reads both the way transformers 5 does
(`RotaryEmbeddingConfigMixin.convert_rope_params_to_dict` and `standardize_rope_params`): the
scaling dict is `rope_scaling`, else `rope_parameters`; the theta is the dict's, else the top-level
one, else 10000; the type is `rope_type`, else the older `type`, else "default" (no scaling); a
llama3 scaling without `original_max_position_embeddings` takes `max_position_embeddings`.

`write` produces the transformers 4 layout, which transformers 5 (and vLLM) also read, while
transformers 4 ignores `rope_parameters` and would run a transformers 5 file with theta 10000.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from .contract.model import ROPE_HIGH_FREQ_FACTOR, ROPE_LOW_FREQ_FACTOR, ModelConfig, RopeScaling

FILE = "config.json"
DEFAULT_ROPE_THETA = 10000.0
"""transformers' rope_theta when config.json gives none (`default_theta` in transformers 5)."""
DEFAULT_MAX_POSITIONS = 2048
"""LlamaConfig's max_position_embeddings when config.json gives none."""
TOKEN_FIELDS = ("bos_token_id", "eos_token_id", "pad_token_id")
"""What config.json says about the tokenizer: kept from the checkpoint a run started from."""


class HfConfigError(ValueError):
    """config.json is missing, unreadable, or not a Llama model's; the message says which."""


def read(directory: str | Path) -> dict:
    """The config.json of the checkpoint in `directory`."""
    path = Path(directory) / FILE
    try:
        config = json.loads(path.read_text())
    except OSError as e:
        raise HfConfigError(f"{path}: {e.strerror}") from None
    except ValueError:
        raise HfConfigError(f"{path}: not JSON") from None
    if not isinstance(config, dict):
        raise HfConfigError(f"{path}: not a JSON object")
    return config


def dims(config: dict) -> dict:
    """The dimensions a LlamaConfig describes, in ModelConfig's names."""
    try:
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        return {
            "layers": config["num_hidden_layers"],
            "hidden": hidden,
            "heads": heads,
            "kv_heads": config.get("num_key_value_heads") or heads,
            "head_dim": config.get("head_dim") or hidden // heads,
            "ffn": config["intermediate_size"],
            "vocab": vocab(config),
            "tie_embeddings": bool(config.get("tie_word_embeddings", False)),
        }
    except KeyError as e:
        raise HfConfigError(f"{FILE} has no {e.args[0]}: not a Llama-style checkpoint") from None


@dataclass(frozen=True)
class Rope:
    """A checkpoint's RoPE. `parameters` is the scaling dict as the file has it (None without
    scaling), for messages; `scaling` is it as this trainer implements it: None for no scaling or
    a type other than llama3 (`implemented` tells the two apart)."""

    theta: float
    kind: str
    parameters: dict | None
    scaling: RopeScaling | None

    @property
    def implemented(self) -> bool:
        return self.kind in ("default", "llama3")


def rope(config: dict) -> Rope:
    """The RoPE of config.json in either layout (see the module docstring)."""
    given = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if not isinstance(given, dict) or any(isinstance(v, dict) for v in given.values()):
        raise HfConfigError(f"{FILE}: RoPE set per layer type ({given!r}): not a Llama-style checkpoint")
    theta = float(given.get("rope_theta", config.get("rope_theta", DEFAULT_ROPE_THETA)))
    kind = given.get("rope_type") or given.get("type") or "default"
    if kind == "default":
        return Rope(theta, kind, None, None)
    parameters = {k: v for k, v in given.items() if k != "rope_theta"}
    if kind != "llama3":
        return Rope(theta, kind, parameters, None)
    original = given.get("original_max_position_embeddings") or config.get("max_position_embeddings")
    try:
        scaling = RopeScaling(
            factor=float(given["factor"]),
            low_freq_factor=float(given.get("low_freq_factor", ROPE_LOW_FREQ_FACTOR)),
            high_freq_factor=float(given.get("high_freq_factor", ROPE_HIGH_FREQ_FACTOR)),
            original_context=int(original or DEFAULT_MAX_POSITIONS),
        )
    except ValidationError as e:
        raise HfConfigError(f"{FILE}: rope_scaling: {'; '.join(err['msg'] for err in e.errors())}") from None
    return Rope(theta, kind, parameters, scaling)


def vocab(config: dict) -> int:
    try:
        return int(config["vocab_size"])
    except (KeyError, TypeError, ValueError):
        raise HfConfigError(f"{FILE} has no vocab_size: not a Llama-style checkpoint") from None


def token_ids(config: dict) -> dict:
    return {k: config[k] for k in TOKEN_FIELDS if k in config}


def write(model: ModelConfig, *, max_positions: int, dtype: str, rms_norm_eps: float, token_ids: dict) -> dict:
    """config.json of a LlamaForCausalLM with these dimensions, in the transformers 4 layout."""
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": model.hidden,
        "intermediate_size": model.ffn,
        "num_attention_heads": model.heads,
        "num_key_value_heads": model.kv_heads,
        "num_hidden_layers": model.layers,
        "head_dim": model.head_dim,
        "vocab_size": model.vocab,
        "rms_norm_eps": rms_norm_eps,
        "rope_theta": model.rope_theta,
        "tie_word_embeddings": model.tie_embeddings,
        "max_position_embeddings": max_positions,
        "attention_bias": False,
        "mlp_bias": False,
        "torch_dtype": dtype,
    }
    if model.rope_scaling is not None:
        r = model.rope_scaling
        config["rope_scaling"] = {
            "rope_type": "llama3",
            "factor": r.factor,
            "low_freq_factor": r.low_freq_factor,
            "high_freq_factor": r.high_freq_factor,
            "original_max_position_embeddings": r.original_context,
        }
    return config | token_ids
