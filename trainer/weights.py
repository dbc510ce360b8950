"""Hugging Face Llama checkpoints (config.json + *.safetensors): starting weights, and export.

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
the norm epsilon must match. config.json itself (either transformers layout) is read and written
by `hfconfig`. Llama 3.1's "llama3" rope_scaling is implemented (model.ropeScaling);
other scaling types are reported as not applied.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jax
import ml_dtypes
import numpy as np

from . import hfconfig
from .contract.model import RMS_NORM_EPS, ModelConfig
from .model import Model, param_shapes

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
    """The tensors a safetensors file declares, each checked to lie inside the file."""
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else size
        if length > size - 8:
            raise WeightsError(f"{path.name}: not a safetensors file (a Git LFS pointer or a truncated download?)")
        try:
            header = json.loads(f.read(length))
        except ValueError:
            raise WeightsError(f"{path.name}: its safetensors header is not JSON") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{path.name}: its safetensors header is not a JSON object")
    return {
        name: _tensor(path, name, entry, 8 + length, size) for name, entry in header.items() if name != "__metadata__"
    }


def _tensor(path: Path, name: str, entry, data_start: int, size: int) -> _Tensor:
    """One header entry, checked: a known dtype, and offsets that hold exactly its shape, in the file."""
    try:
        dtype, shape = entry["dtype"], tuple(int(d) for d in entry["shape"])
        begin, end = (int(o) for o in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise WeightsError(f"{path.name}: tensor {name} has a malformed header entry {entry!r}") from None
    if dtype not in _DTYPES:
        raise WeightsError(f"{path.name}: tensor {name} has dtype {dtype}; supported: {', '.join(_DTYPES)}")
    if (
        not 0 <= begin <= end
        or end - begin != math.prod(shape) * np.dtype(_DTYPES[dtype]).itemsize
        or data_start + end > size
    ):
        raise WeightsError(
            f"{path.name}: tensor {name} does not fit its declared shape {list(shape)} "
            f"or lies beyond the end of the file"
        )
    return _Tensor(path, dtype, shape, data_start + begin)


def _files(directory: Path) -> list[Path]:
    """The files of the checkpoint: those its index names when it has one (a directory may hold
    leftovers of another save), else every *.safetensors file."""
    index = directory / "model.safetensors.index.json"
    if not index.is_file():
        return sorted(directory.glob("*.safetensors"))
    try:
        names = set(json.loads(index.read_text())["weight_map"].values())
    except (ValueError, KeyError, TypeError, AttributeError):
        raise WeightsError(f"{index}: not a safetensors index (no weight_map)") from None
    files = sorted(directory / name for name in names if isinstance(name, str))
    missing = [f.name for f in files if not f.is_file()]
    if missing or len(files) != len(names):
        raise WeightsError(f"{index} names files that are not there: {', '.join(missing) or names}")
    return files


class SafetensorsDir:
    """Every tensor of a directory's *.safetensors files, read on demand from memory maps."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        files = _files(self.directory)
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
        return data[t.begin : t.begin + count * dtype.itemsize].view(dtype).reshape(t.shape)


def differences(config: ModelConfig, hf_config: dict) -> tuple[list[str], list[str]]:
    """(mismatches that make the checkpoint unusable, deliberate RoPE changes to report)."""
    if hf_config.get("model_type", "llama") != "llama":
        return [f"model_type is {hf_config['model_type']!r}, only llama checkpoints are supported"], []
    try:
        theirs, rope = hfconfig.dims(hf_config), hfconfig.rope(hf_config)
    except hfconfig.HfConfigError as e:
        raise WeightsError(str(e)) from None
    fatal = [
        f"{name}: the job's model has {getattr(config, name)}, the checkpoint {value}"
        for name, value in theirs.items()
        if getattr(config, name) != value
    ]
    eps = hf_config.get("rms_norm_eps", RMS_NORM_EPS)
    if not math.isclose(eps, RMS_NORM_EPS, rel_tol=1e-6):
        fatal.append(f"rms_norm_eps: the checkpoint uses {eps}, this trainer {RMS_NORM_EPS}")
    notes = []
    if not math.isclose(rope.theta, config.rope_theta, rel_tol=1e-9):
        notes.append(f"rope_theta {config.rope_theta:g} (the checkpoint was trained with {rope.theta:g})")
    if rope.scaling != config.rope_scaling or not rope.implemented:  # differs, or a type not implemented
        ours = "no rope_scaling" if config.rope_scaling is None else f"rope_scaling {config.rope_scaling!r}"
        notes.append(f"{ours} (the checkpoint has {rope.parameters or 'none'})")
    return fatal, notes


@dataclass(frozen=True)
class _Mapping:
    """Where a parameter lives in a Hugging Face checkpoint (per layer for the stacked ones) and
    how its layout changes each way: reshapes and transposes only, so both give views."""

    tensor: str
    to_ours: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _mappings(config: ModelConfig) -> tuple[dict[str, _Mapping], dict[str, _Mapping]]:
    """(top-level parameters, stacked layer parameters) of this model."""
    H, D = config.hidden, config.head_dim

    def same(tensor):
        return _Mapping(tensor, lambda a: a, lambda a: a)

    def transposed(tensor):
        return _Mapping(tensor, lambda a: a.T, lambda a: a.T)

    def heads_out(tensor, n):  # [n*D, H] -> [H, n, D]
        return _Mapping(
            tensor, lambda a: a.reshape(n, D, H).transpose(2, 0, 1), lambda a: a.transpose(1, 2, 0).reshape(n * D, H)
        )

    top = {"embed": same("model.embed_tokens.weight"), "final_norm": same("model.norm.weight")}
    if not config.tie_embeddings:
        top["lm_head"] = transposed("lm_head.weight")
    layers = {
        "attn_norm": same("input_layernorm.weight"),
        "wq": heads_out("self_attn.q_proj.weight", config.heads),
        "wk": heads_out("self_attn.k_proj.weight", config.kv_heads),
        "wv": heads_out("self_attn.v_proj.weight", config.kv_heads),
        "wo": _Mapping(
            "self_attn.o_proj.weight",  # [H, heads*D] -> [heads, D, H]
            lambda a: a.reshape(H, config.heads, D).transpose(1, 2, 0),
            lambda a: a.transpose(2, 0, 1).reshape(H, config.heads * D),
        ),
        "mlp_norm": same("post_attention_layernorm.weight"),
        "w_gate": transposed("mlp.gate_proj.weight"),
        "w_up": transposed("mlp.up_proj.weight"),
        "w_down": transposed("mlp.down_proj.weight"),
    }
    return top, layers


def _layer_tensor(layer: int, mapping: _Mapping) -> str:
    return f"model.layers.{layer}.{mapping.tensor}"


def hf_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor a Hugging Face Llama checkpoint of these dimensions holds, with its shape."""

    def hf_shape(mapping: _Mapping, shape: tuple[int, ...]) -> tuple[int, ...]:
        return mapping.to_hf(np.broadcast_to(np.float32(0), shape)).shape  # zero strides: no memory

    top, layers = _mappings(config)
    ours = param_shapes(config)
    shapes = {m.tensor: hf_shape(m, ours[name]) for name, m in top.items()}
    for name, m in layers.items():
        shape = hf_shape(m, ours["layers"][name][1:])
        shapes |= {_layer_tensor(layer, m): shape for layer in range(config.layers)}
    return shapes


def _check_tensors(weights: SafetensorsDir, config: ModelConfig) -> None:
    for name, shape in hf_shapes(config).items():
        found = weights.tensors.get(name)
        if found is None:
            raise WeightsError(f"{weights.directory}: the checkpoint has no tensor {name}")
        if found.shape != shape:
            raise WeightsError(
                f"{weights.directory}: tensor {name} has shape {list(found.shape)}, the model needs {list(shape)}"
            )


def load_params(directory: str | Path, model: Model) -> tuple[dict, list[str]]:
    """`model`'s fp32 master weights from the checkpoint in `directory`, laid out on its mesh; also
    the RoPE changes (see `differences`). Raises WeightsError naming what does not match."""
    directory, config, shardings = Path(directory), model.config, model.param_shardings(weights_only=True)
    try:
        hf_config = hfconfig.read(directory)
    except hfconfig.HfConfigError as e:
        raise WeightsError(str(e)) from None
    fatal, notes = differences(config, hf_config)
    if fatal:
        raise WeightsError(f"{directory} does not match the job's model: " + "; ".join(fatal))
    weights = SafetensorsDir(directory)
    _check_tensors(weights, config)  # before any reshape: every view below is then well-formed
    shapes = param_shapes(config)

    def build(shape, sharding, shard_of: Callable[[tuple], np.ndarray]) -> jax.Array:
        return jax.make_array_from_callback(
            shape, sharding, lambda index: np.ascontiguousarray(shard_of(index), dtype=np.float32)
        )

    top, stacked = _mappings(config)
    params = {}
    for name, m in top.items():
        params[name] = build(
            shapes[name], shardings[name], lambda index, m=m: m.to_ours(weights.array(m.tensor))[index]
        )
    layers = {}
    for name, m in stacked.items():

        def shard_of(index, m=m):
            return np.stack(
                [
                    m.to_ours(weights.array(_layer_tensor(layer, m)))[index[1:]]
                    for layer in range(config.layers)[index[0]]
                ]
            )

        layers[name] = build(shapes["layers"][name], shardings["layers"][name], shard_of)
    params["layers"] = layers
    return params, notes


def hf_tensors_of(params: dict, config: ModelConfig) -> dict[str, np.ndarray]:
    """The inverse of `load_params`' mapping: host parameters -> Hugging Face names and layouts."""
    top, layers = _mappings(config)
    out = {m.tensor: m.to_hf(params[name]) for name, m in top.items()}
    for layer in range(config.layers):
        out |= {_layer_tensor(layer, m): m.to_hf(params["layers"][name][layer]) for name, m in layers.items()}
    return out


_CODES = {np.dtype(t): code for code, t in _DTYPES.items()}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray], dtype: np.dtype) -> None:
    """One safetensors file: 8-byte little-endian header size, JSON header, then the raw data."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, array in tensors.items():
        size = math.prod(array.shape) * dtype.itemsize
        header[name] = {"dtype": _CODES[dtype], "shape": list(array.shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(encoded)))
        f.write(encoded)
        for array in tensors.values():
            f.write(np.ascontiguousarray(array, dtype=dtype).tobytes())  # x86 and ARM: little-endian


EXPORT_DTYPES = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}


def require_empty(directory: str | Path) -> None:
    """Exports go to a new or empty directory: files of an earlier save beside them would be read
    as part of the checkpoint."""
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise WeightsError(f"{directory} is not an empty directory; export into a new one")


def save_hf_checkpoint(
    params: dict,
    config: ModelConfig,
    directory: str | Path,
    *,
    dtype: str = "bfloat16",
    max_positions: int,
    max_shard_bytes: int = 5 * 2**30,
    token_ids: dict | None = None,
) -> list[Path]:
    """Writes host parameters as a Hugging Face Llama checkpoint (config.json, safetensors files of
    at most `max_shard_bytes` each and, when there are several, model.safetensors.index.json) into
    a new or empty directory."""
    directory = Path(directory)
    require_empty(directory)
    directory.mkdir(parents=True, exist_ok=True)
    target = np.dtype(EXPORT_DTYPES[dtype])
    tensors = hf_tensors_of(params, config)
    shards: list[dict[str, np.ndarray]] = [{}]
    size = 0
    for name, array in tensors.items():
        nbytes = array.size * target.itemsize
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = array
        size += nbytes
    names = (
        ["model.safetensors"]
        if len(shards) == 1
        else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
    )
    for name, shard in zip(names, shards, strict=False):
        write_safetensors(directory / name, shard, target)
    if len(shards) > 1:
        index = {
            "metadata": {"total_size": sum(a.size for a in tensors.values()) * target.itemsize},
            "weight_map": {t: name for name, shard in zip(names, shards, strict=False) for t in shard},
        }
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    hf_config = hfconfig.write(
        config, max_positions=max_positions, dtype=dtype, rms_norm_eps=RMS_NORM_EPS, token_ids=token_ids or {}
    )
    (directory / hfconfig.FILE).write_text(json.dumps(hf_config, indent=2))
    return [directory / name for name in names]
