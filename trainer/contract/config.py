"""The trainer's config schema: the contract between the operator and the trainer.

The operator renders a `TrainerConfig` into a ConfigMap (YAML, snake_case keys); every worker
reads it with `load_config`. This module imports no JAX so the operator can use it. Process
identity (coordinator, process count and id, local devices) is not part of the config: it comes
from the JAX distributed environment variables the operator sets per pod.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from .adaptive import SHARD_MULTIPLE, shard_fits
from .model import ModelConfig

# The choices of the contract, in the trainer's (snake_case) spelling. The API and the planner use
# these types; the API spells the two-word values in camelCase (longctx_operator.api.spec).
Attention = Literal["ring", "all_gather", "ulysses", "hybrid", "token_ring"]
DEFAULT_ATTENTION: Attention = "ring"
"""The attention kind where nothing chose one: the API's default, the trainer's, the kernel's, and
what `auto` means on CPU (the planner models GPUs only)."""
LoadBalance = Literal["dual_chunk_swap", "striped", "none", "documents"]
DEFAULT_LOAD_BALANCE: LoadBalance = "dual_chunk_swap"
"""The load balancing where nothing chose one: the trainer's default, the kernel's, and what the
API's `auto` means without a document mask."""
Auto = Literal["auto"]
AUTO: Auto = "auto"
"""The API's and the planner's "choose for me" value of attention and load balance; what it
resolves to reaches the trainer, never `auto` itself."""
Precision = Literal["bf16", "fp32", "fp8"]
Schedule = Literal["cosine", "constant"]
DataKind = Literal["synthetic", "tokens", "text"]
CollectivePermute = Literal["nccl", "nvshmem"]
RematPolicy = Literal["full", "save_attention"]
"""What a remat'ed layer keeps for its backward: "full" keeps only its input and reruns the whole
layer, attention's forward (the ring) included; "save_attention" also keeps attention's output
and the residuals of its backward (q, k, v, output, fp32 log-sum-exp), so the backward reruns
the layer's matmuls but never the attention forward (on the host with offload)."""
DEFAULT_REMAT_POLICY: RematPolicy = "full"
"""The policy where nothing chose one: the trainer's default, and CPU jobs' (no planner)."""


def sequence_split(load_balance: LoadBalance, context: int) -> int:
    """Pieces a sequence is cut into: dual-chunk-swap gives every device two chunks (and so does
    the documents layout, which deals every document the same way, doc_balance.py)."""
    return 2 * context if load_balance in ("dual_chunk_swap", "documents") else context


def ulysses_kv_repeat(heads: int, kv_heads: int, ulysses: int) -> int:
    """How many copies of each K/V head Ulysses attention makes before its all-to-all.

    `heads` and `kv_heads` are one tensor-parallel rank's; `ulysses` is the number of devices an
    all-to-all spans (the context axis for attention ulysses, parallelism.ulysses for hybrid). The
    all-to-all gives each of them 1/ulysses of the query heads, so heads must divide by it. K/V
    heads split the same way when they divide too (repeat 1); when there are fewer K/V heads than
    devices, each is repeated ulysses / kv_heads times, which needs kv_heads to divide ulysses, so every device
    gets exactly the one K/V head its query heads share (GQA groups never straddle devices).
    Raises ValueError naming the rule otherwise."""
    if heads % ulysses:
        raise ValueError(
            f"Ulysses attention needs heads per tensor rank ({heads}) divisible by its degree ({ulysses} devices)"
        )
    if kv_heads % ulysses == 0:
        return 1
    if ulysses % kv_heads:
        raise ValueError(
            f"Ulysses attention needs kv_heads per tensor rank ({kv_heads}) to divide its degree ({ulysses} "
            "devices) or be divisible by it"
        )
    return ulysses // kv_heads


def ulysses_degree(attention: Attention, context: int, ulysses: int) -> int:
    """Devices one Ulysses all-to-all spans: the context axis (ulysses), a group of `ulysses`
    devices (hybrid), or 1 (no all-to-all)."""
    return {"ulysses": context, "hybrid": ulysses}.get(attention, 1)


def hybrid_split(context: int, ulysses: int) -> int:
    """The ring size of hybrid attention: `context` devices in groups of `ulysses` (Ulysses inside a
    group, a ring over the groups). Both parts must be real: 1 < ulysses < context, dividing it."""
    if not 1 < ulysses < context or context % ulysses:
        raise ValueError(
            f"hybrid attention needs parallelism.ulysses ({ulysses}) between 1 and context ({context}), dividing it"
        )
    return context // ulysses


def trainer_default(config: type[BaseModel], field: str):
    """The trainer's default for `field` of `config`: the one home of a setting's default, which the
    API (operator/api/spec.py) reads and declares with its own bounds."""
    return config.model_fields[field].default


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParallelConfig(_Strict):
    data: int = Field(1, gt=0)
    context: int = Field(1, gt=0)
    tensor: int = Field(1, gt=0)
    attention: Attention = DEFAULT_ATTENTION
    ulysses: int = Field(1, gt=0, description="Ulysses group size inside the context axis (attention hybrid).")
    load_balance: LoadBalance = DEFAULT_LOAD_BALANCE
    adaptive: bool = Field(
        False,
        description="Per-batch adaptive context parallelism (adaptive_cp.py): documents up to half a shard "
        "are attended on one device, only longer ones over the ring.",
    )

    @property
    def devices(self) -> int:
        return self.data * self.context * self.tensor


class OffloadConfig(_Strict):
    enabled: bool = False
    chunk_tokens: int | None = Field(
        None, gt=0, description="Tokens per sequence chunk on each device; None = no chunking."
    )


FP8_MATMULS = ("wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down")
"""The layer weights whose matmuls run in FP8 under precision fp8. The LM head stays in bf16 (FP8
logits hurt the loss most, and its chunked loss scan would need one scaling state per chunk);
attention stays bf16 with fp32 statistics (`Fp8Config.lm_head` puts the LM head in FP8 too)."""
LOSS_CHUNK_TOKENS = 2048
"""Tokens per device whose logits exist at once, at most (the model's loss chunk, the planner's memory)."""


def loss_chunk(local_tokens: int, chunk_tokens: int = LOSS_CHUNK_TOKENS) -> int:
    """The tokens of one loss chunk of a device's `local_tokens`: the largest divisor of them up to
    `chunk_tokens`. A shard that the chunk does not divide (an adaptive variant's 17/16 of a shard)
    still walks in chunks no longer than it, never as one block of logits."""
    return next(n for n in range(min(chunk_tokens, local_tokens), 0, -1) if local_tokens % n == 0)


class Fp8Config(_Strict):
    """FP8 matmuls (precision fp8): e4m3 inputs and weights, e5m2 output gradients, per-tensor
    delayed scaling. Activations and attention stay bf16; master weights and optimizer state fp32."""

    amax_history: int = Field(
        16, gt=0, le=1024, description="Uses of a tensor whose largest magnitude sets its next FP8 scale."
    )
    lm_head: bool = Field(
        False, description="The LM head's matmul in FP8 too (one scaling state per loss chunk); off: bf16."
    )


class OptimizerConfig(_Strict):
    learning_rate: float = Field(3e-4, gt=0)
    warmup_steps: int = Field(100, ge=0)
    weight_decay: float = Field(0.1, ge=0)
    grad_clip: float = Field(1.0, gt=0)
    schedule: Schedule = Field(
        "cosine", description="After the linear warm-up: cosine decay to 10% by the last step, or constant."
    )
    beta1: float = Field(0.9, gt=0, lt=1)
    beta2: float = Field(0.95, gt=0, lt=1)


def token_file_record(path: str | Path) -> Path:
    """Where `longctx tokenize` records a token file's end-of-text id (and vocabulary, documents,
    tokens): <token file>.json beside it."""
    return Path(f"{path}.json")


BYTE_VOCAB = 256  # byte-level text: token ids are the bytes
TEXT_DOCUMENT_SEPARATOR = 0
"""The byte that ends each document of byte-level text under packing: NUL, which never occurs in
text (the files of a directory are joined with it)."""


class PackingConfig(_Strict):
    """Many documents packed into one sequence (data.packing): where documents end, and whether
    attention and RoPE respect the boundaries."""

    document_mask: bool = Field(
        False,
        description="Attention stays within each document, and the loss leaves out the prediction "
        "across a document boundary (of the token after the separator from the separator).",
    )
    reset_positions: bool = Field(False, description="RoPE positions restart at 0 at the start of each document.")
    separator: int | None = Field(
        None,
        ge=0,
        description="Token id that ends each document. Default: the end-of-text id recorded by "
        "`longctx tokenize` beside a token file, byte 0 (NUL) for text; synthetic data needs one.",
    )

    @property
    def enabled(self) -> bool:
        return self.document_mask or self.reset_positions


class DataConfig(_Strict):
    kind: DataKind = "synthetic"
    path: str | None = Field(None, description="Token file (.bin of uint16/uint32) or text file/dir.")
    seed: int = 0
    packing: PackingConfig = PackingConfig()

    @model_validator(mode="after")
    def _path_needed(self) -> DataConfig:
        if self.kind != "synthetic" and not self.path:
            raise ValueError(f"data.path is required for data.kind={self.kind}")
        if self.kind == "synthetic" and self.packing.enabled and self.packing.separator is None:
            raise ValueError(
                "data.packing with synthetic data needs packing.separator (the token that ends a document)"
            )
        return self


URL_MARK = "://"
"""A path holding this is an object-store URL (gs://, s3://), given to orbax as written; any
other path is a directory on the process's own file system."""


def is_url(path: str) -> bool:
    return URL_MARK in path


class CheckpointConfig(_Strict):
    path: str | None = Field(None, description="Directory for orbax checkpoints; None disables.")
    interval_steps: int = Field(100, gt=0)
    keep: int = Field(2, gt=0)


class MetricsConfig(_Strict):
    port: int = Field(9400, ge=0, le=65535, description="0 disables the exporter.")
    job: str = Field("longctx", description="Value of the `job_name` label on every metric.")
    probe_every_steps: int = Field(
        10,
        ge=0,
        description="Time the compute probe (longctx_trainer.probe) after every this many steps; 0: never.",
    )


class TrainerConfig(_Strict):
    job_name: str = "longctx"
    model: ModelConfig
    sequence_length: int = Field(gt=0)
    global_batch_tokens: int = Field(gt=0)
    steps: int = Field(gt=0)
    precision: Precision = "bf16"
    fp8: Fp8Config = Fp8Config()
    remat: bool = True
    remat_policy: RematPolicy = Field(
        DEFAULT_REMAT_POLICY, description="With remat: what each layer keeps for the backward (see RematPolicy)."
    )
    seed: int = 0
    log_every: int = Field(1, gt=0)
    parallelism: ParallelConfig = ParallelConfig()
    offload: OffloadConfig = OffloadConfig()
    communication: CollectivePermute = "nccl"
    optimizer: OptimizerConfig = OptimizerConfig()
    data: DataConfig = DataConfig()
    checkpoint: CheckpointConfig = CheckpointConfig()
    metrics: MetricsConfig = MetricsConfig()
    init_from: str | None = Field(
        None,
        description="Hugging Face Llama checkpoint directory (config.json, *.safetensors) "
        "whose weights start a run that has no checkpoint of its own yet; "
        "None = random initialisation.",
    )

    @model_validator(mode="after")
    def _check_layout(self) -> TrainerConfig:
        p = self.parallelism
        if self.global_batch_tokens % self.sequence_length:
            raise ValueError("global_batch_tokens must be a multiple of sequence_length")
        if self.batch_size % p.data:
            raise ValueError(f"batch of {self.batch_size} sequences does not divide over data={p.data}")
        if self.model.heads % p.tensor or self.model.kv_heads % p.tensor:
            raise ValueError("parallelism.tensor must divide model heads and kv_heads")
        if p.attention in ("ulysses", "hybrid"):
            if p.attention == "hybrid":
                hybrid_split(p.context, p.ulysses)
            degree = ulysses_degree(p.attention, p.context, p.ulysses)
            ulysses_kv_repeat(self.model.heads // p.tensor, self.model.kv_heads // p.tensor, degree)
        elif p.ulysses != 1:
            raise ValueError("parallelism.ulysses applies to attention hybrid only")
        if p.load_balance == "documents" and not self.data.packing.document_mask:
            raise ValueError("parallelism.load_balance documents needs data.packing.document_mask")
        if p.adaptive and not (
            self.data.packing.document_mask and p.attention == "ring" and p.load_balance == "dual_chunk_swap"
        ):
            raise ValueError("parallelism.adaptive needs data.packing.document_mask, attention ring, dual_chunk_swap")
        if p.adaptive and (self.offload.enabled or not shard_fits(self.sequence_length, p.context)):
            raise ValueError(
                f"parallelism.adaptive needs no offload and sequence_length / context divisible by {SHARD_MULTIPLE}"
            )
        split = sequence_split(p.load_balance, p.context)
        if self.sequence_length % split:
            raise ValueError(f"sequence_length must be divisible by {split}")
        if self.offload.chunk_tokens and (self.sequence_length // p.context) % self.offload.chunk_tokens:
            raise ValueError("offload.chunk_tokens must divide the per-device sequence shard")
        return self

    @property
    def batch_size(self) -> int:
        """Sequences per global batch."""
        return self.global_batch_tokens // self.sequence_length


def load_config(path: str | Path) -> TrainerConfig:
    return TrainerConfig.model_validate(yaml.safe_load(Path(path).read_text()))


def dump_config(config: TrainerConfig) -> str:
    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)
