"""Cross-field validation rules of the LongContextJob spec, each written once.

Every rule carries the CEL expression the API server evaluates (emitted into the CRD as
`x-kubernetes-validations`) and the Python predicate `longctx validate` evaluates offline, with one
message and one field path. Integration tests feed the same malformed manifests to both.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from longctx_trainer.contract import podenv
from longctx_trainer.contract.config import (
    AUTO,
    BYTE_VOCAB,
    URL_MARK,
    hybrid_split,
    is_url,
    sequence_split,
    ulysses_kv_repeat,
)
from longctx_trainer.contract.hardware import CPU, FABRICS, GPUS
from longctx_trainer.contract.presets import PRESETS

from ..names import RESERVED_MOUNTS
from .spec import LongContextJobSpec, ModelSpec

RDMA_FABRICS = tuple(name for name, fabric in FABRICS.items() if fabric.rdma)
GPU_NIC_NETWORKS = {name: f.gpu_nic_networks for name, f in FABRICS.items() if f.gpu_nic_networks}
_NOT_CPU = f"self.resources.gpuType != '{CPU}'"  # CEL of not spec.on_cpu
FP8_GPU_TYPES = (*(name for name, gpu in GPUS.items() if gpu.fp8_flops), CPU)  # cpu: emulated
FABRIC_GPU_TYPES = {name: f.gpu_types for name, f in FABRICS.items() if f.gpu_types}
MAX_NAME_LENGTH = 40  # leaves room for "-g<generation>-<index>" within a 63-character hostname
DIMENSIONS = ("layers", "hidden", "heads", "kvHeads", "ffn", "vocab")


@dataclass(frozen=True)
class Rule:
    scope: str
    """Dotted path of the object the rule sits on: "" (root), "spec", "spec.model", ..."""
    cel: str
    message: str
    check: Callable[[Any], bool] | None
    """Python predicate over the object at scope; None for transition rules (server only)."""
    field_path: str | None = None
    """Relative JSON path of the offending field below scope, e.g. ".parallelism.tensor"."""

    @property
    def field(self) -> str:
        # The only root-scope rules are about metadata.name, which has no schema of its own to
        # carry a fieldPath.
        return (self.scope + (self.field_path or "")).lstrip(".") or "metadata.name"

    def to_cel(self) -> dict:
        out = {"rule": self.cel, "message": self.message}
        if self.field_path:
            out["fieldPath"] = self.field_path
        return out


def _or(names) -> str:
    """English list: "a", "a or b", "a, b or c"."""
    return " or ".join(filter(None, (", ".join(names[:-1]), names[-1])))


def _cel_list(values) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def _cel_preset_map(attr: str) -> str:
    return "{" + ", ".join(f"'{n}': {getattr(d, attr)}" for n, d in PRESETS.items()) + "}"


# Heads and KV heads of the model, from its preset or its explicit dimensions.
_CEL_HEADS = f"(has(self.model.preset) ? {_cel_preset_map('heads')}[self.model.preset] : self.model.heads)"
_CEL_KV = f"(has(self.model.preset) ? {_cel_preset_map('kv_heads')}[self.model.preset] : self.model.kvHeads)"
_CEL_HEADS_KNOWN = "(has(self.model.preset) || (has(self.model.heads) && has(self.model.kvHeads)))"
_CEL_BATCH = "((has(self.globalBatchTokens) ? self.globalBatchTokens : self.sequenceLength) / self.sequenceLength)"


def _heads(m: ModelSpec) -> tuple[int, int] | None:
    if m.preset:
        d = PRESETS[m.preset]
        return d.heads, d.kv_heads
    if m.heads and m.kv_heads:
        return m.heads, m.kv_heads
    return None


def _tensor_divides_heads(s: LongContextJobSpec) -> bool:
    heads = _heads(s.model)
    t = s.parallelism.tensor
    return t is None or heads is None or (heads[0] % t == 0 and heads[1] % t == 0)


def _splits_heads(s: LongContextJobSpec, attention: str, degree: int | None) -> bool:
    """The trainer's own rule (ulysses_kv_repeat) for `attention` over `degree` devices, once
    tensor and the degree are pinned and tensor divides the heads (the tensor rule reports those)."""
    p, heads = s.parallelism, _heads(s.model)
    if p.attention != attention or None in (degree, p.tensor) or heads is None:
        return True
    if heads[0] % p.tensor or heads[1] % p.tensor:
        return True
    try:
        ulysses_kv_repeat(heads[0] // p.tensor, heads[1] // p.tensor, degree)
    except ValueError:
        return False
    return True


def _hybrid_groups(p) -> bool:
    if p.attention != "hybrid" or None in (p.context, p.ulysses):
        return True
    try:
        hybrid_split(p.context, p.ulysses)
    except ValueError:
        return False
    return True


def _sequence_divisible(s: LongContextJobSpec) -> bool:
    """Checked only when context is pinned, as the CEL rule does (the planner checks the rest)."""
    context = s.parallelism.context
    if context is None:
        return True
    return s.sequence_length % sequence_split(s.trainer_load_balance(), context) == 0


def _dims_set(m: ModelSpec) -> list[bool]:
    return [
        m.layers is not None,
        m.hidden is not None,
        m.heads is not None,
        m.kv_heads is not None,
        m.ffn is not None,
        m.vocab is not None,
    ]


_NVSHMEM = "self.communication.collectivePermute != 'nvshmem'"


_DOT_SEGMENT = "(^|/)[.][.]?(/|$)"  # one regex for Python and CEL (RE2): a '.' or '..' segment


def _clean(path: str) -> bool:
    """Whether `path` has no '.', '..' or empty segment ('//', a trailing '/'), so that comparing
    it as a string compares the directory it names."""
    return re.search(_DOT_SEGMENT, path) is None and "//" not in path and not path.endswith("/")


def _cel_clean(path: str) -> str:
    return f"(!{path}.matches('{_DOT_SEGMENT}') && !{path}.contains('//') && !{path}.endsWith('/'))"


def _mountable(path: str) -> bool:
    """Whether a claim may be mounted at `path`: absolute, not the root, clean (no '.', '..' or '//'
    segment), and neither on nor under a mount of the operator's own (the trainer config, /dev/shm)."""
    return (
        path.startswith("/")
        and path != "/"
        and _clean(path)
        and not any(path == m or path.startswith(m + "/") for m in RESERVED_MOUNTS)
    )


def _cel_mountable(path: str) -> str:
    reserved = " && ".join(f"!({path} == '{m}' || {path}.startsWith('{m}/'))" for m in RESERVED_MOUNTS)
    return f"({path}.startsWith('/') && {path} != '/' && {_cel_clean(path)} && {reserved})"


_MOUNT_MESSAGE = (
    "must be an absolute path, not '/', without '.', '..' or empty segments ('//', a trailing '/'), and "
    "not on or under " + " or ".join(RESERVED_MOUNTS) + ": its claim is mounted there"
)
# Processes per pod, as spec.processes_per_node() decides it: their metrics ports are port + local.
_CEL_PROCESSES = (
    "(has(self.parallelism.processesPerNode) ? self.parallelism.processesPerNode : "
    "(self.communication.collectivePermute == 'nvshmem' ? self.resources.gpusPerNode : 1))"
)
_TOLERATIONS = "!has(self.tolerations) || self.tolerations.all(t, "
_GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu.", "nvidia.com/mig-")
_CEL_RESERVED_ENV = _cel_list(sorted(podenv.RESERVED))
_CEL_USER_SETTABLE_ENV = _cel_list(sorted(podenv.USER_SETTABLE))


def _packing_on(s: LongContextJobSpec) -> bool:
    return s.data.packing.document_mask or s.data.packing.reset_positions


def _names_gpu(resource: str | None) -> bool:
    return resource is not None and (resource == "nvidia.com/gpu" or resource.startswith(_GPU_RESOURCE_PREFIXES))


def _metrics_ports_clear(s: LongContextJobSpec) -> bool:
    port = s.metrics.port
    return not port <= s.network.coordinator_port < port + s.processes_per_node()


def _restart_port_clear(s: LongContextJobSpec) -> bool:
    port = s.network.restart_port
    return not s.restart_policy.in_place or (
        port != s.network.coordinator_port and not s.metrics.port <= port < s.metrics.port + s.processes_per_node()
    )


def _extended_resource(name: str | None) -> bool:
    """Kubernetes' IsExtendedResourceName beyond the pattern: outside kubernetes.io, no quota prefix."""
    return name is None or not ("kubernetes.io/" in name or name.startswith("requests."))


def _nested(a: str, b: str) -> bool:
    """Whether paths a and b are one directory or one inside the other (as the CEL rule spells it)."""
    return (a + "/").startswith(b + "/") or (b + "/").startswith(a + "/")


PYTORCH_EXAMPLE = "longctx_trainer.pytorch"
"""The bundled PyTorch example trainer's module (`python -m longctx_trainer.pytorch`). A job whose
trainer.command or trainer.args name it runs that trainer, which implements only part of the spec:
the rules below refuse the rest before the job runs (the trainer refuses it too, pytorch/__main__.py)."""
_CEL_PYTORCH_EXAMPLE = (
    f"(has(self.trainer) && '{PYTORCH_EXAMPLE}' in "
    "((has(self.trainer.command) ? self.trainer.command : []) + (has(self.trainer.args) ? self.trainer.args : [])))"
)
_PYTORCH_EXAMPLE_IS = f"the PyTorch example trainer ({PYTORCH_EXAMPLE}) "
_SCALED_PRESETS = [name for name, d in PRESETS.items() if d.rope_scaling is not None and d.rope_scaling.factor != 1]


def _pytorch_example(s: LongContextJobSpec) -> bool:
    return s.trainer is not None and PYTORCH_EXAMPLE in [*(s.trainer.command or []), *s.trainer.args]


def _plain_rope(m: ModelSpec) -> bool:
    """No RoPE scaling after the preset's defaults and the spec's own (factor 1 is none)."""
    if m.rope_scaling is not None:
        return m.rope_scaling.factor == 1
    return m.preset not in _SCALED_PRESETS


def _pytorch_rule(cel: str, message: str, check: Callable[[LongContextJobSpec], bool], field_path: str) -> Rule:
    """A rule that holds for every job but those of the PyTorch example trainer."""
    return Rule(
        "spec",
        f"!{_CEL_PYTORCH_EXAMPLE} || ({cel})",
        _PYTORCH_EXAMPLE_IS + message,
        lambda s: not _pytorch_example(s) or check(s),
        field_path,
    )


_PYTORCH_EXAMPLE_RULES = (
    _pytorch_rule(
        f"self.resources.gpuType == '{CPU}'",
        f"trains on CPU over gloo: resources.gpuType must be {CPU}",
        lambda s: s.on_cpu,
        ".resources.gpuType",
    ),
    _pytorch_rule(
        "self.precision == 'fp32'",
        "computes in fp32 only: precision must be fp32",
        lambda s: s.precision == "fp32",
        ".precision",
    ),
    _pytorch_rule(
        "!has(self.initFrom)",
        "starts from random weights only: remove initFrom",
        lambda s: s.init_from is None,
        ".initFrom",
    ),
    _pytorch_rule(
        "has(self.model.ropeScaling) ? double(self.model.ropeScaling.factor) == 1.0 : "
        f"!(has(self.model.preset) && self.model.preset in {_cel_list(_SCALED_PRESETS)})",
        "applies plain RoPE only: model.ropeScaling (set, or the preset's: "
        + _or(_SCALED_PRESETS)
        + ") must be absent or factor 1",
        lambda s: _plain_rope(s.model),
        ".model.ropeScaling",
    ),
    _pytorch_rule(
        "!has(self.parallelism.tensor) || self.parallelism.tensor == 1",
        "has no tensor parallelism: parallelism.tensor must be 1",
        lambda s: s.parallelism.tensor in (None, 1),
        ".parallelism.tensor",
    ),
    _pytorch_rule(
        f"self.parallelism.attention in ['ring', '{AUTO}']",
        "implements ring attention only: parallelism.attention must be ring",
        lambda s: s.parallelism.attention in ("ring", AUTO),
        ".parallelism.attention",
    ),
    _pytorch_rule(
        "!(has(self.offload.enabled) && self.offload.enabled) && !has(self.offload.chunkTokens)",
        "has no sequence chunking or host offload: leave offload unset",
        lambda s: not s.offload.enabled and s.offload.chunk_tokens is None,
        ".offload",
    ),
    _pytorch_rule(
        "!(self.data.packing.documentMask || self.data.packing.resetPositions)",
        "has no document mask or position reset: leave data.packing unset",
        lambda s: not _packing_on(s),
        ".data.packing",
    ),
)


RULES: tuple[Rule, ...] = (
    Rule(
        "spec",
        "self.hangDetection.floorSeconds <= self.hangDetection.startupSeconds",
        "hangDetection.floorSeconds must be at most startupSeconds: the first step comes after "
        "rendezvous and compiling",
        lambda s: s.hang_detection.floor_seconds <= s.hang_detection.startup_seconds,
        ".hangDetection.floorSeconds",
    ),
    Rule(
        "",
        f"self.metadata.name.size() <= {MAX_NAME_LENGTH}",
        f"metadata.name must be at most {MAX_NAME_LENGTH} characters: pod hostnames are derived from it",
        lambda job: len(job["metadata"]["name"]) <= MAX_NAME_LENGTH,
    ),
    Rule(
        "",
        "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS-1035 label (lowercase letters, digits and '-', starting with a "
        "letter): it names the headless Service",
        lambda job: re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", job["metadata"]["name"]) is not None,
    ),
    Rule(
        "spec.model",
        "has(self.preset) || (" + " && ".join(f"has(self.{d})" for d in DIMENSIONS) + ")",
        "set a preset, or all of layers, hidden, heads, kvHeads, ffn and vocab",
        lambda m: m.preset is not None or all(_dims_set(m)),
    ),
    Rule(
        "spec.model",
        "!has(self.preset) || !(" + " || ".join(f"has(self.{d})" for d in DIMENSIONS + ("tieEmbeddings",)) + ")",
        "preset and explicit dimensions are mutually exclusive",
        lambda m: m.preset is None or not (any(_dims_set(m)) or m.tie_embeddings is not None),
        ".preset",
    ),
    Rule(
        "spec.model",
        "!has(self.ropeScaling) || self.ropeScaling.highFreqFactor > self.ropeScaling.lowFreqFactor",
        "ropeScaling.highFreqFactor must be above lowFreqFactor",
        lambda m: m.rope_scaling is None or m.rope_scaling.high_freq_factor > m.rope_scaling.low_freq_factor,
        ".ropeScaling.highFreqFactor",
    ),
    Rule(
        "spec.model",
        "!has(self.hidden) || !has(self.heads) || self.hidden % self.heads == 0",
        "heads must divide hidden",
        lambda m: m.hidden is None or m.heads is None or m.hidden % m.heads == 0,
        ".heads",
    ),
    Rule(
        "spec.model",
        "!has(self.heads) || !has(self.kvHeads) || self.heads % self.kvHeads == 0",
        "kvHeads must divide heads",
        lambda m: m.heads is None or m.kv_heads is None or m.heads % m.kv_heads == 0,
        ".kvHeads",
    ),
    Rule(
        "spec.model",
        "self == oldSelf",
        "model is immutable: existing checkpoints depend on it; create a new job instead",
        None,
    ),
    Rule(
        "spec.parallelism",
        "self.mode != 'manual' || (has(self.data) && has(self.context) && has(self.tensor))",
        "manual mode needs data, context and tensor",
        lambda p: p.mode != "manual" or None not in (p.data, p.context, p.tensor),
        ".mode",
    ),
    Rule(
        "spec.parallelism",
        "self.mode != 'auto' || !(has(self.data) || has(self.context) || has(self.tensor))",
        "data, context and tensor are chosen by the planner in auto mode; set mode: manual to pin them",
        lambda p: p.mode != "auto" or (p.data, p.context, p.tensor) == (None, None, None),
        ".mode",
    ),
    Rule(
        "spec.parallelism",
        "!has(self.ulysses) || self.attention == 'hybrid'",
        "ulysses is the group size of attention hybrid; set attention: hybrid or remove it",
        lambda p: p.ulysses is None or p.attention == "hybrid",
        ".ulysses",
    ),
    Rule(
        "spec.parallelism",
        "self.attention != 'hybrid' || !has(self.context) || !has(self.ulysses)"
        " || (self.ulysses < self.context && self.context % self.ulysses == 0)",
        "hybrid attention needs ulysses below context and dividing it (a ring of context / ulysses groups)",
        _hybrid_groups,
        ".ulysses",
    ),
    Rule(
        "spec",
        f"self.parallelism.attention != 'hybrid' || {_NOT_CPU} || has(self.parallelism.ulysses)",
        "hybrid attention on cpu needs parallelism.ulysses (the planner, which picks it, models GPUs only)",
        lambda s: s.parallelism.attention != "hybrid" or not s.on_cpu or bool(s.parallelism.ulysses),
        ".parallelism.ulysses",
    ),
    Rule(
        "spec",
        "!has(self.parallelism.data) || !has(self.parallelism.context) || !has(self.parallelism.tensor)"
        " || self.parallelism.data * self.parallelism.context * self.parallelism.tensor"
        " == self.resources.nodes * self.resources.gpusPerNode",
        "data * context * tensor must equal nodes * gpusPerNode",
        lambda s: (
            None in (s.parallelism.data, s.parallelism.context, s.parallelism.tensor)
            or s.parallelism.data * s.parallelism.context * s.parallelism.tensor == s.gpus
        ),
        ".parallelism",
    ),
    Rule(
        "spec",
        "!has(self.parallelism.tensor) || self.resources.gpusPerNode % self.parallelism.tensor == 0",
        "tensor must divide gpusPerNode: tensor parallelism stays inside a node",
        lambda s: s.parallelism.tensor is None or s.resources.gpus_per_node % s.parallelism.tensor == 0,
        ".parallelism.tensor",
    ),
    Rule(
        "spec",
        f"!has(self.parallelism.tensor) || !{_CEL_HEADS_KNOWN} || "
        f"({_CEL_HEADS} % self.parallelism.tensor == 0 && {_CEL_KV} % self.parallelism.tensor == 0)",
        "tensor must divide the model's heads and kvHeads",
        _tensor_divides_heads,
        ".parallelism.tensor",
    ),
    Rule(
        "spec",
        "self.parallelism.attention != 'ulysses' || !has(self.parallelism.context) || !has(self.parallelism.tensor)"
        f" || !{_CEL_HEADS_KNOWN} || {_CEL_HEADS} % self.parallelism.tensor != 0"
        f" || {_CEL_KV} % self.parallelism.tensor != 0 || ({_CEL_HEADS} / self.parallelism.tensor"
        f" % self.parallelism.context == 0 && ({_CEL_KV} / self.parallelism.tensor % self.parallelism.context == 0"
        f" || self.parallelism.context % ({_CEL_KV} / self.parallelism.tensor) == 0))",
        "ulysses attention needs heads / tensor divisible by context, and kvHeads / tensor divisible by "
        "context or dividing it",
        lambda s: _splits_heads(s, "ulysses", s.parallelism.context),
        ".parallelism.context",
    ),
    Rule(
        "spec",
        "self.parallelism.attention != 'hybrid' || !has(self.parallelism.ulysses) || !has(self.parallelism.tensor)"
        f" || !{_CEL_HEADS_KNOWN} || {_CEL_HEADS} % self.parallelism.tensor != 0"
        f" || {_CEL_KV} % self.parallelism.tensor != 0 || ({_CEL_HEADS} / self.parallelism.tensor"
        f" % self.parallelism.ulysses == 0 && ({_CEL_KV} / self.parallelism.tensor % self.parallelism.ulysses == 0"
        f" || self.parallelism.ulysses % ({_CEL_KV} / self.parallelism.tensor) == 0))",
        "hybrid attention needs heads / tensor divisible by ulysses, and kvHeads / tensor divisible by "
        "ulysses or dividing it",
        lambda s: _splits_heads(s, "hybrid", s.parallelism.ulysses),
        ".parallelism.ulysses",
    ),
    Rule(
        "spec",
        "!has(self.parallelism.context) || self.sequenceLength % ((self.parallelism.loadBalance in "
        f"['dualChunkSwap', 'documents', '{AUTO}'] ? 2 : 1) * self.parallelism.context) == 0",
        "sequenceLength must be divisible by context (by 2 * context with dualChunkSwap, documents or auto)",
        _sequence_divisible,
        ".sequenceLength",
    ),
    Rule(
        "spec",
        "self.parallelism.loadBalance != 'documents' || self.data.packing.documentMask",
        "parallelism.loadBalance documents needs data.packing.documentMask (it balances the masked documents)",
        lambda s: s.parallelism.load_balance != "documents" or s.data.packing.document_mask,
        ".parallelism.loadBalance",
    ),
    Rule(
        "spec",
        "!self.parallelism.adaptive || (self.data.packing.documentMask && self.parallelism.attention == 'ring' "
        f"&& self.parallelism.loadBalance in ['dualChunkSwap', '{AUTO}'] "
        "&& !(has(self.offload.enabled) && self.offload.enabled))",
        "parallelism.adaptive needs data.packing.documentMask, attention ring, loadBalance dualChunkSwap or auto, "
        "no offload",
        lambda s: (
            not s.parallelism.adaptive
            or (
                s.data.packing.document_mask
                and s.parallelism.attention == "ring"
                and s.trainer_load_balance() == "dual_chunk_swap"
                and not s.offload.enabled
            )
        ),
        ".parallelism.adaptive",
    ),
    Rule(
        "spec",
        "!has(self.globalBatchTokens) || self.globalBatchTokens % self.sequenceLength == 0",
        "globalBatchTokens must be a multiple of sequenceLength",
        lambda s: s.global_batch_tokens is None or s.global_batch_tokens % s.sequence_length == 0,
        ".globalBatchTokens",
    ),
    Rule(
        "spec",
        f"!has(self.parallelism.data) || {_CEL_BATCH} % self.parallelism.data == 0",
        "the batch (globalBatchTokens / sequenceLength sequences) must divide over data",
        lambda s: s.parallelism.data is None or (s.batch_tokens // s.sequence_length) % s.parallelism.data == 0,
        ".parallelism.data",
    ),
    Rule(
        "spec",
        "!has(self.parallelism.processesPerNode) || "
        "self.resources.gpusPerNode % self.parallelism.processesPerNode == 0",
        "processesPerNode must divide gpusPerNode",
        lambda s: (
            s.parallelism.processes_per_node is None
            or s.resources.gpus_per_node % s.parallelism.processes_per_node == 0
        ),
        ".parallelism.processesPerNode",
    ),
    Rule(
        "spec",
        f"{_NVSHMEM} || !has(self.parallelism.processesPerNode) || "
        "self.parallelism.processesPerNode == self.resources.gpusPerNode",
        "nvshmem needs one GPU per process: processesPerNode must equal gpusPerNode",
        lambda s: (
            s.communication.collective_permute != "nvshmem"
            or s.parallelism.processes_per_node in (None, s.resources.gpus_per_node)
        ),
        ".parallelism.processesPerNode",
    ),
    Rule(
        "spec",
        f"{_NVSHMEM} || self.resources.nodes == 1 || self.network.fabric in {_cel_list(RDMA_FABRICS)}",
        f"nvshmem across nodes needs an RDMA fabric ({_or(RDMA_FABRICS)})",
        lambda s: (
            s.communication.collective_permute != "nvshmem"
            or s.resources.nodes == 1
            or s.network.fabric in RDMA_FABRICS
        ),
        ".communication.collectivePermute",
    ),
    Rule(
        "spec",
        f"{_NVSHMEM} || {_NOT_CPU}",
        "nvshmem needs GPUs",
        lambda s: s.communication.collective_permute != "nvshmem" or not s.on_cpu,
        ".communication.collectivePermute",
    ),
    Rule(
        "spec",
        "!has(self.offload.chunkTokens) || !has(self.parallelism.context) || "
        "(self.sequenceLength / self.parallelism.context) % self.offload.chunkTokens == 0",
        "offload.chunkTokens must divide the per-device sequence shard (sequenceLength / context)",
        lambda s: (
            s.offload.chunk_tokens is None
            or s.parallelism.context is None
            or (s.sequence_length // s.parallelism.context) % s.offload.chunk_tokens == 0
        ),
        ".offload.chunkTokens",
    ),
    Rule(
        "spec",
        f"self.precision != 'fp8' || self.resources.gpuType in {_cel_list(FP8_GPU_TYPES)}",
        f"precision fp8 needs FP8 tensor cores: resources.gpuType {_or(FP8_GPU_TYPES)}",
        lambda s: s.precision != "fp8" or s.resources.gpu_type in FP8_GPU_TYPES,
        ".precision",
    ),
    Rule(
        "spec",
        "self.scheduling.admission != 'kueue' || has(self.scheduling.queueName)",
        "admission kueue needs scheduling.queueName",
        lambda s: s.scheduling.admission != "kueue" or bool(s.scheduling.queue_name),
        ".scheduling.queueName",
    ),
    Rule(
        "spec",
        "self.scheduling.kueueTopology == 'none' || "
        "(self.scheduling.admission == 'kueue' && has(self.scheduling.topologyKey))",
        "scheduling.kueueTopology needs admission kueue and scheduling.topologyKey",
        lambda s: (
            s.scheduling.kueue_topology == "none"
            or (s.scheduling.admission == "kueue" and bool(s.scheduling.topology_key))
        ),
        ".scheduling.kueueTopology",
    ),
    Rule(
        "spec",
        "!has(self.scheduling.workloadPriorityClassName) || self.scheduling.admission == 'kueue'",
        "scheduling.workloadPriorityClassName needs admission kueue",
        lambda s: s.scheduling.workload_priority_class_name is None or s.scheduling.admission == "kueue",
        ".scheduling.workloadPriorityClassName",
    ),
    Rule(
        "spec",
        "self.network.fabric != 'roce' || (has(self.network.networks) && size(self.network.networks) > 0)",
        "fabric roce needs network.networks (the Multus networks of the RoCE NICs)",
        lambda s: s.network.fabric != "roce" or len(s.network.networks) > 0,
        ".network.networks",
    ),
    *(
        Rule(
            "spec",
            f"self.network.fabric != '{fabric}' || (has(self.network.networks) && "
            f"size(self.network.networks) == {count})",
            f"fabric {fabric} needs network.networks with the {count} GPU NIC network names",
            lambda s, fabric=fabric, count=count: s.network.fabric != fabric or len(s.network.networks) == count,
            ".network.networks",
        )
        for fabric, count in GPU_NIC_NETWORKS.items()
    ),
    *(
        Rule(
            "spec",
            f"self.network.fabric != '{fabric}' || self.resources.gpuType in {_cel_list(gpus)}",
            f"fabric {fabric} runs on {_or(gpus)} nodes",
            lambda s, fabric=fabric, gpus=gpus: s.network.fabric != fabric or s.resources.gpu_type in gpus,
            ".resources.gpuType",
        )
        for fabric, gpus in FABRIC_GPU_TYPES.items()
    ),
    Rule(
        "spec",
        "self.network.fabric != 'efa' || has(self.network.efaDevicesPerNode)",
        "fabric efa needs network.efaDevicesPerNode (e.g. 32 on p5.48xlarge)",
        lambda s: s.network.fabric != "efa" or s.network.efa_devices_per_node is not None,
        ".network.efaDevicesPerNode",
    ),
    Rule(
        "spec",
        "!has(self.network.gidIndex) || self.network.fabric == 'roce'",
        "network.gidIndex applies to fabric roce only",
        lambda s: s.network.gid_index is None or s.network.fabric == "roce",
        ".network.gidIndex",
    ),
    Rule(
        "spec",
        f"{_NOT_CPU} || self.network.fabric == 'tcp'",
        "gpuType cpu runs over fabric tcp only",
        lambda s: not s.on_cpu or s.network.fabric == "tcp",
        ".network.fabric",
    ),
    Rule(
        "spec",
        f"{_NOT_CPU} || self.parallelism.mode == 'manual'",
        "gpuType cpu needs parallelism.mode manual: the planner models GPUs only",
        lambda s: not s.on_cpu or s.parallelism.mode == "manual",
        ".parallelism.mode",
    ),
    Rule(
        "spec",
        "self.data.kind == 'synthetic' || has(self.data.path)",
        "data.path is required unless data.kind is synthetic",
        lambda s: s.data.kind == "synthetic" or bool(s.data.path),
        ".data.path",
    ),
    Rule(
        "spec",
        "self.data.kind != 'synthetic' || has(self.data.packing.separator) || "
        "!(self.data.packing.documentMask || self.data.packing.resetPositions)",
        "data.packing with synthetic data needs data.packing.separator (the token that ends a document)",
        lambda s: s.data.kind != "synthetic" or s.data.packing.separator is not None or not _packing_on(s),
        ".data.packing.separator",
    ),
    Rule(
        "spec",
        f"self.data.kind != 'text' || !has(self.data.packing.separator) || self.data.packing.separator < {BYTE_VOCAB}",
        f"data.packing.separator must be a byte (below {BYTE_VOCAB}) for text, which is tokenised byte-level",
        lambda s: s.data.kind != "text" or s.data.packing.separator is None or s.data.packing.separator < BYTE_VOCAB,
        ".data.packing.separator",
    ),
    Rule(
        "spec",
        f"!has(self.initFrom) || !self.initFrom.path.contains('{URL_MARK}')",
        "initFrom.path must be a directory in the pod: mount the checkpoint with "
        "initFrom.persistentVolumeClaim (object-store URLs are not read)",
        lambda s: s.init_from is None or not is_url(s.init_from.path),
        ".initFrom.path",
    ),
    Rule(
        "spec",
        "!has(self.initFrom) || !has(self.initFrom.persistentVolumeClaim) || " + _cel_mountable("self.initFrom.path"),
        "initFrom.path " + _MOUNT_MESSAGE,
        lambda s: s.init_from is None or s.init_from.persistent_volume_claim is None or _mountable(s.init_from.path),
        ".initFrom.path",
    ),
    Rule(
        "spec",
        "!has(self.checkpoint.persistentVolumeClaim) || " + _cel_mountable("self.checkpoint.path"),
        "checkpoint.path " + _MOUNT_MESSAGE,
        lambda s: s.checkpoint.persistent_volume_claim is None or _mountable(s.checkpoint.path),
        ".checkpoint.path",
    ),
    Rule(
        "spec",
        "!has(self.network.rdmaResource) || !(self.network.rdmaResource == 'nvidia.com/gpu' || "
        + " || ".join(f"self.network.rdmaResource.startsWith('{p}')" for p in _GPU_RESOURCE_PREFIXES)
        + ")",
        "network.rdmaResource may not name a GPU resource: the GPU count is resources.gpusPerNode",
        lambda s: not _names_gpu(s.network.rdma_resource),
        ".network.rdmaResource",
    ),
    Rule(
        "spec",
        "!has(self.network.rdmaResource) || !(self.network.rdmaResource.contains('kubernetes.io/') || "
        "self.network.rdmaResource.startsWith('requests.'))",
        "network.rdmaResource must be an extended resource name (<domain>/<name>), outside kubernetes.io "
        "and not starting with requests.",
        lambda s: _extended_resource(s.network.rdma_resource),
        ".network.rdmaResource",
    ),
    Rule(
        "spec",
        f"self.network.coordinatorPort < self.metrics.port || "
        f"self.network.coordinatorPort >= self.metrics.port + {_CEL_PROCESSES}",
        "network.coordinatorPort must not be a metrics port: metrics.port to metrics.port + processes "
        "per pod - 1 (one per trainer process)",
        _metrics_ports_clear,
        ".metrics.port",
    ),
    Rule(
        "spec",
        "!self.restartPolicy.inPlace || !has(self.trainer) || !has(self.trainer.command)",
        "restartPolicy.inPlace needs the bundled trainer's launcher, which restarts the trainer processes: "
        "leave trainer.command unset",
        lambda s: not s.restart_policy.in_place or s.trainer is None or s.trainer.command is None,
        ".restartPolicy.inPlace",
    ),
    Rule(
        "spec",
        "!self.restartPolicy.inPlace || (self.network.restartPort != self.network.coordinatorPort && "
        "(self.network.restartPort < self.metrics.port || "
        f"self.network.restartPort >= self.metrics.port + {_CEL_PROCESSES}))",
        "network.restartPort must be neither network.coordinatorPort nor a metrics port (metrics.port to "
        "metrics.port + processes per pod - 1) where restartPolicy.inPlace is on",
        _restart_port_clear,
        ".network.restartPort",
    ),
    Rule(
        "spec.scheduling",
        _TOLERATIONS + "!has(t.operator) || t.operator != 'Exists' || !has(t.value) || t.value == '')",
        "a toleration with operator Exists takes no value",
        lambda sch: all(t.operator != "Exists" or not t.value for t in sch.tolerations),
        ".tolerations",
    ),
    Rule(
        "spec.scheduling",
        _TOLERATIONS + "!has(t.tolerationSeconds) || (has(t.effect) && t.effect == 'NoExecute'))",
        "tolerationSeconds needs effect NoExecute",
        lambda sch: all(t.toleration_seconds is None or t.effect == "NoExecute" for t in sch.tolerations),
        ".tolerations",
    ),
    # Paths without a claim (the claim's mount rule above says the same of theirs): the nested-path
    # rule below compares their text.
    Rule(
        "spec",
        f"has(self.checkpoint.persistentVolumeClaim) || self.checkpoint.path.contains('{URL_MARK}') || "
        + _cel_clean("self.checkpoint.path"),
        "checkpoint.path must not have '.', '..' or empty segments ('//', a trailing '/')",
        lambda s: (
            s.checkpoint.persistent_volume_claim is not None or is_url(s.checkpoint.path) or _clean(s.checkpoint.path)
        ),
        ".checkpoint.path",
    ),
    Rule(
        "spec",
        "!has(self.initFrom) || has(self.initFrom.persistentVolumeClaim) || " + _cel_clean("self.initFrom.path"),
        "initFrom.path must not have '.', '..' or empty segments ('//', a trailing '/')",
        lambda s: s.init_from is None or s.init_from.persistent_volume_claim is not None or _clean(s.init_from.path),
        ".initFrom.path",
    ),
    Rule(
        "spec",
        f"!has(self.env) || self.env.all(e, !(e.name in {_CEL_RESERVED_ENV}) && "
        f"(!e.name.startsWith('{podenv.RESERVED_PREFIX}') || e.name in {_CEL_USER_SETTABLE_ENV}))",
        "env may not set the operator's own variables ("
        + ", ".join(sorted(podenv.RESERVED))
        + f", {podenv.RESERVED_PREFIX}* except "
        + ", ".join(sorted(podenv.USER_SETTABLE))
        + ")",
        lambda s: not any(podenv.reserved(e.name) for e in s.env),
        ".env",
    ),
    Rule(
        "spec",
        "!has(self.trainer) || self.trainer.framework != 'pytorch' || has(self.trainer.command)",
        "trainer.command is required for a pytorch trainer: e.g. [torchrun, train.py], or "
        "[python, -m, longctx_trainer.pytorch] for longctx's example trainer",
        lambda s: s.trainer is None or s.trainer.framework != "pytorch" or bool(s.trainer.command),
        ".trainer.command",
    ),
    Rule(
        "spec",
        "!has(self.trainer) || self.trainer.framework != 'pytorch' || "
        "self.communication.collectivePermute != 'nvshmem'",
        "communication.collectivePermute nvshmem drives XLA's collectives: JAX trainers only",
        lambda s: (
            s.trainer is None or s.trainer.framework != "pytorch" or s.communication.collective_permute != "nvshmem"
        ),
        ".communication.collectivePermute",
    ),
    Rule(
        "spec",
        "!has(self.image) || !has(self.trainer) || !has(self.trainer.image)",
        "set the image once: spec.image or trainer.image",
        lambda s: s.image is None or s.trainer is None or s.trainer.image is None,
        ".trainer.image",
    ),
    Rule(
        "spec",
        "!has(self.initFrom) || !((self.initFrom.path + '/').startsWith(self.checkpoint.path + '/') || "
        "(self.checkpoint.path + '/').startsWith(self.initFrom.path + '/'))",
        "initFrom.path and checkpoint.path must not be the same directory or one inside the other: "
        "the weights are mounted read-only, the job's checkpoints are written",
        lambda s: s.init_from is None or not _nested(s.init_from.path, s.checkpoint.path),
        ".initFrom.path",
    ),
    Rule(
        "spec",
        "self.sequenceLength == oldSelf.sequenceLength && "
        "(has(self.globalBatchTokens) ? self.globalBatchTokens : self.sequenceLength) == "
        "(has(oldSelf.globalBatchTokens) ? oldSelf.globalBatchTokens : oldSelf.sequenceLength)",
        "sequenceLength and globalBatchTokens are immutable: the data position in the checkpoint depends on them",
        None,
        ".sequenceLength",
    ),
    Rule(
        "spec.checkpoint",
        "self.path == oldSelf.path",
        "checkpoint.path is immutable: restarts resume from it",
        None,
        ".path",
    ),
    *_PYTORCH_EXAMPLE_RULES,
)


def rules_at(scope: str) -> list[Rule]:
    return [r for r in RULES if r.scope == scope]
