"""Starting weights from a Hugging Face Llama checkpoint (config.json + *.safetensors).

Long-context training usually continues a published model. This module reads the checkpoint's
safetensors files lazily (memory-mapped, headers parsed here: no torch, no extra package), checks
that its config.json describes the model the job trains, and builds each parameter straight into
its sharding: every device's shard is read from the mapped file by `jax.make_array_from_callback`,
so no process ever holds a whole fp32 copy of the model.

Layout. Hugging Face stores each projection as a torch Linear weight [out, in] with heads
flattened as head-major (n * head_dim + d), and applies RoPE in the rotate-half form with
inv_freq = theta ** (-2i / head_dim); this model's einsum layout and `model.rope` use the same
conventions, so the mapping is reshapes and transposes only (all views of the mapped file):

    q_proj [heads*D, H]  -> wq [H, heads, D]      o_proj [H, heads*D] -> wo [heads, D, H]
    gate/up_proj [F, H]  -> w_gate/w_up [H, F]    down_proj [H, F]    -> w_down [F, H]
    embed_tokens [V, H]  -> embed [V, H]          lm_head [V, H]      -> lm_head [H, V]

RoPE settings may differ from the checkpoint's on purpose (raising the base frequency or the
scaling factor is how context is extended); `differences` reports them, and only the shapes and
the norm epsilon must match. Llama 3.1's "llama3" rope_scaling is implemented (model.ropeScaling);
other scaling types are reported as not applied.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import jax
import ml_dtypes
import numpy as np

from .model import RMS_NORM_EPS, param_shapes
from .presets import ModelDims, RopeScaling

_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F64": np.float64}


class WeightsError(ValueError):
    """The checkpoint cannot start this model; the message says what differs."""


@dataclass(frozen=True)
class _Tensor:
    file: Path
    dtype: str
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in the file


def _header(path: Path) -> dict[str, _Tensor]:
    with path.open("rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in _DTYPES:
            raise WeightsError(f"{path.name}: tensor {name} has dtype {entry['dtype']}; "
                               f"supported: {', '.join(_DTYPES)}")
        tensors[name] = _Tensor(path, entry["dtype"], tuple(entry["shape"]), 8 + length + entry["data_offsets"][0])
    return tensors


class SafetensorsDir:
    """Every tensor of a directory's *.safetensors files, read on demand from memory maps."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        files = sorted(self.directory.glob("*.safetensors"))
        if not files:
            raise WeightsError(f"{self.directory}: no *.safetensors files")
        self.tensors: dict[str, _Tensor] = {}
        for file in files:
            self.tensors.update(_header(file))
        self._maps: dict[Path, np.memmap] = {}

    def array(self, name: str) -> np.ndarray:
        """The tensor as a read-only numpy view of its file (nothing is read until used)."""
        try:
            t = self.tensors[name]
        except KeyError:
            raise WeightsError(f"{self.directory}: the checkpoint has no tensor {name}") from None
        data = self._maps.get(t.file)
        if data is None:
            data = self._maps[t.file] = np.memmap(t.file, dtype=np.uint8, mode="r")
        dtype = np.dtype(_DTYPES[t.dtype])
        count = math.prod(t.shape)
        return data[t.begin:t.begin + count * dtype.itemsize].view(dtype).reshape(t.shape)


def checkpoint_dims(config: dict) -> dict:
    """The dimensions a Hugging Face LlamaConfig describes, in ModelDims' names."""
    try:
        return {"layers": config["num_hidden_layers"], "hidden": config["hidden_size"],
                "heads": config["num_attention_heads"],
                "kv_heads": config.get("num_key_value_heads", config["num_attention_heads"]),
                "ffn": config["intermediate_size"], "vocab": config["vocab_size"],
                "tie_embeddings": bool(config.get("tie_word_embeddings", False))}
    except KeyError as e:
        raise WeightsError(f"config.json has no {e.args[0]}: not a Llama-style checkpoint") from None


def differences(dims: ModelDims, config: dict) -> tuple[list[str], list[str]]:
    """(mismatches that make the checkpoint unusable, deliberate RoPE changes to report)."""
    if config.get("model_type", "llama") != "llama":
        return [f"model_type is {config['model_type']!r}, only llama checkpoints are supported"], []
    theirs = checkpoint_dims(config)
    fatal = [f"{name}: the job's model has {getattr(dims, name)}, the checkpoint {value}"
             for name, value in theirs.items() if getattr(dims, name) != value]
    eps = config.get("rms_norm_eps", RMS_NORM_EPS)
    if not math.isclose(eps, RMS_NORM_EPS, rel_tol=1e-6):
        fatal.append(f"rms_norm_eps: the checkpoint uses {eps}, this trainer {RMS_NORM_EPS}")
    notes = []
    theta = config.get("rope_theta", 10000.0)
    if not math.isclose(theta, dims.rope_theta, rel_tol=1e-9):
        notes.append(f"rope_theta {dims.rope_theta:g} (the checkpoint was trained with {theta:g})")
    theirs = config.get("rope_scaling") or None
    parsed = checkpoint_rope_scaling(theirs)
    if parsed != dims.rope_scaling or (theirs and parsed is None):  # differs, or a type not implemented
        ours = "no rope_scaling" if dims.rope_scaling is None else f"rope_scaling {dims.rope_scaling}"
        notes.append(f"{ours} (the checkpoint has {theirs or 'none'})")
    return fatal, notes


def checkpoint_rope_scaling(scaling: dict | None) -> RopeScaling | None:
    """A Hugging Face rope_scaling of type llama3 as RopeScaling; None for none or another type."""
    if not scaling or (scaling.get("rope_type") or scaling.get("type")) != "llama3":
        return None
    return RopeScaling(factor=float(scaling["factor"]),
                       low_freq_factor=float(scaling.get("low_freq_factor", 1.0)),
                       high_freq_factor=float(scaling.get("high_freq_factor", 4.0)),
                       original_context=int(scaling.get("original_max_position_embeddings", 8192)))


def _layer_views(weights: SafetensorsDir, dims: ModelDims) -> dict[str, Callable[[int], np.ndarray]]:
    """For each stacked layer parameter: layer index -> that layer in this model's layout (a view)."""
    H, D = dims.hidden, dims.head_dim

    def hf(suffix: str) -> Callable[[int], np.ndarray]:
        return lambda layer: weights.array(f"model.layers.{layer}.{suffix}")

    q, k, v, o = (hf(f"self_attn.{p}_proj.weight") for p in "qkvo")
    gate, up, down = (hf(f"mlp.{p}_proj.weight") for p in ("gate", "up", "down"))
    return {
        "attn_norm": hf("input_layernorm.weight"),
        "wq": lambda l: q(l).reshape(dims.heads, D, H).transpose(2, 0, 1),
        "wk": lambda l: k(l).reshape(dims.kv_heads, D, H).transpose(2, 0, 1),
        "wv": lambda l: v(l).reshape(dims.kv_heads, D, H).transpose(2, 0, 1),
        "wo": lambda l: o(l).reshape(H, dims.heads, D).transpose(1, 2, 0),
        "mlp_norm": hf("post_attention_layernorm.weight"),
        "w_gate": lambda l: gate(l).T,
        "w_up": lambda l: up(l).T,
        "w_down": lambda l: down(l).T,
    }


def _top_views(weights: SafetensorsDir, dims: ModelDims) -> dict[str, Callable[[], np.ndarray]]:
    views = {"embed": lambda: weights.array("model.embed_tokens.weight"),
             "final_norm": lambda: weights.array("model.norm.weight")}
    if not dims.tie_embeddings:
        views["lm_head"] = lambda: weights.array("lm_head.weight").T
    return views


def _check_shape(name: str, got: tuple[int, ...], want: tuple[int, ...]) -> None:
    if got != want:
        raise WeightsError(f"{name}: the checkpoint's tensor maps to shape {got}, the model needs {want}")


def load_params(directory: str | Path, dims: ModelDims, shardings: dict) -> tuple[dict, list[str]]:
    """fp32 master weights from the checkpoint in `directory`, laid out by `shardings`; also the
    RoPE changes (see `differences`). Raises WeightsError naming what does not match."""
    directory = Path(directory)
    try:
        config = json.loads((directory / "config.json").read_text())
    except OSError as e:
        raise WeightsError(f"{directory}/config.json: {e.strerror}") from None
    fatal, notes = differences(dims, config)
    if fatal:
        raise WeightsError(f"{directory} does not match the job's model: " + "; ".join(fatal))
    weights = SafetensorsDir(directory)
    shapes = param_shapes(dims)

    def build(shape, sharding, shard_of: Callable[[tuple], np.ndarray]) -> jax.Array:
        return jax.make_array_from_callback(
            shape, sharding, lambda index: np.ascontiguousarray(shard_of(index), dtype=np.float32))

    params = {}
    for name, view in _top_views(weights, dims).items():
        _check_shape(name, view().shape, shapes[name])
        params[name] = build(shapes[name], shardings[name], lambda index, view=view: view()[index])
    layers = {}
    for name, view in _layer_views(weights, dims).items():
        shape = shapes["layers"][name]
        _check_shape(f"layers.{name}", view(0).shape, shape[1:])

        def shard_of(index, view=view):
            return np.stack([view(layer)[index[1:]] for layer in range(dims.layers)[index[0]]])

        layers[name] = build(shape, shardings["layers"][name], shard_of)
    params["layers"] = layers
    return params, notes
