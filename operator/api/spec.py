"""The `LongContextJob` spec (longctx.io/v1alpha1) as pydantic models.

These models are the single source of truth for the API: the CRD schema in crds/ is generated from
them (see `crd.py`), `longctx validate` parses manifests with them, and the planner and renderer read
them. Cross-field rules live in `rules.py`, once each, as a CEL expression for the API server and
a Python predicate for offline validation.
"""

from __future__ import annotations

from typing import Annotated, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel

from longctx_trainer.contract.adaptive import LENGTH_SAMPLES
from longctx_trainer.contract.config import (
    AUTO,
    DEFAULT_ATTENTION,
    DEFAULT_LOAD_BALANCE,
    Attention,
    Auto,
    CheckpointConfig,
    CollectivePermute,
    DataConfig,
    DataKind,
    Fp8Config,
    LoadBalance,
    MetricsConfig,
    OptimizerConfig,
    PackingConfig,
    ParallelConfig,
    Precision,
    RematPolicy,
    Schedule,
    TrainerConfig,
    trainer_default,
)
from longctx_trainer.contract.hardware import CPU, FABRICS, GPUS
from longctx_trainer.contract.model import ROPE_HIGH_FREQ_FACTOR, ROPE_LOW_FREQ_FACTOR, ROPE_ORIGINAL_CONTEXT
from longctx_trainer.contract.presets import PRESETS

from ..names import API_VERSION, KIND

# Patterns are checked by pydantic (Rust regex) and by the API server (Go RE2) alike: ASCII classes
# only (no \w or \d, which are Unicode-aware in Rust), anchored, no look-arounds.
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|Ki|Mi|Gi|Ti|Pi)?$"
LABEL_VALUE_PATTERN = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL_PATTERN = f"^{_DNS_LABEL}$"
DNS_SUBDOMAIN_PATTERN = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$"
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
QUALIFIED_NAME_PATTERN = rf"^({_DNS_LABEL}(\.{_DNS_LABEL})*/)?{_NAME_PART}$"
"""A label key, taint key or topology key: an optional DNS-subdomain prefix and a name."""
EXTENDED_RESOURCE_PATTERN = rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*/{_NAME_PART}$"
"""An extended resource name: a qualified name whose DNS-subdomain prefix is required."""
EXTENDED_RESOURCE_MAX_LENGTH = 244
"""Kubernetes checks "requests." + the name as a qualified name: its prefix stays within 253."""
_DOMAIN_PART = r"([A-Za-z0-9]|[A-Za-z0-9][-A-Za-z0-9]*[A-Za-z0-9])"
_PATH_PART = r"[a-z0-9]+(([._]|__|-+)[a-z0-9]+)*"
IMAGE_PATTERN = (
    rf"^(({_DOMAIN_PART}(\.{_DOMAIN_PART})*|\[[0-9A-Fa-f:]+\])(:[0-9]+)?/)?"
    rf"{_PATH_PART}(/{_PATH_PART})*"
    r"(:[A-Za-z0-9_][-A-Za-z0-9_.]{0,127})?"
    r"(@[A-Za-z][A-Za-z0-9]*([-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9A-Fa-f]{32,})?$"
)
"""An OCI image reference: [registry[:port]/]path[:tag][@algorithm:digest]."""
PATH_PATTERN = r"^[^\x00-\x1f\x7f]+$"
"""A file path or URL: anything printable (no control characters)."""
# Upper bound of open-ended counts: the API server keeps a schema's maximum as a float64, which
# holds integers exactly only up to 2**53 (an int64 maximum rounds past int64 and breaks defaults).
MAX_COUNT = 2**53

QualifiedName = Annotated[str, StringConstraints(pattern=QUALIFIED_NAME_PATTERN, max_length=317)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_PATTERN, max_length=63)]
PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
# The hardware catalogue (trainer/contract/hardware.py) is the one list of GPU types and fabrics.
GpuType = Literal[(CPU, *GPUS)]  # type: ignore[valid-type]
FabricName = Literal[tuple(FABRICS)]  # type: ignore[valid-type]


def _trainer_spellings(trainer_choices) -> dict[str, str]:
    """API spelling (camelCase, like every API name) -> the trainer's (snake_case) of each choice."""
    return {to_camel(choice): choice for choice in get_args(trainer_choices)}


TRAINER_ATTENTION = _trainer_spellings(Attention)
TRAINER_LOAD_BALANCE = _trainer_spellings(LoadBalance)
API_ATTENTION = {trainer: api for api, trainer in TRAINER_ATTENTION.items()}
API_LOAD_BALANCE = {trainer: api for api, trainer in TRAINER_LOAD_BALANCE.items()}
TRAINER_REMAT_POLICY = _trainer_spellings(RematPolicy)
API_REMAT_POLICY = {trainer: api for api, trainer in TRAINER_REMAT_POLICY.items()}
ApiRematPolicy = Literal[tuple(TRAINER_REMAT_POLICY)]  # type: ignore[valid-type]
ApiAttentionKind = Literal[tuple(TRAINER_ATTENTION)]  # type: ignore[valid-type]
ApiAttention = Literal[(*TRAINER_ATTENTION, AUTO)]  # type: ignore[valid-type]
ApiLoadBalanceKind = Literal[tuple(TRAINER_LOAD_BALANCE)]  # type: ignore[valid-type]
ApiLoadBalance = Literal[(*TRAINER_LOAD_BALANCE, AUTO)]  # type: ignore[valid-type]


class ApiModel(BaseModel):
    """camelCase on the wire, unknown fields rejected and no type coercion ("true" is no boolean,
    1 is no string), like the API server's structural schema."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        strict=True,
        allow_inf_nan=False,
        use_attribute_docstrings=True,
    )


class RopeScalingSpec(ApiModel):
    """Llama 3.1-style RoPE frequency scaling ("rope_type": "llama3" in Hugging Face configs)."""

    factor: float = Field(gt=0, le=1024)
    """How much long wavelengths are stretched (8 in Llama 3.1, 32 in Llama 3.2)."""
    low_freq_factor: float = Field(ROPE_LOW_FREQ_FACTOR, gt=0)
    """Wavelengths longer than originalContext / lowFreqFactor are stretched by factor."""
    high_freq_factor: float = Field(ROPE_HIGH_FREQ_FACTOR, gt=0)
    """Wavelengths shorter than originalContext / highFreqFactor are kept; in between, interpolated."""
    original_context: int = Field(ROPE_ORIGINAL_CONTEXT, ge=1, le=MAX_COUNT)
    """Context the model was first trained at (original_max_position_embeddings)."""


class ModelSpec(ApiModel):
    """The model to train: a preset, or explicit Llama-style dimensions (not both). RoPE settings
    may be set with either (they change no shapes: raising them is how context is extended)."""

    preset: PresetName | None = None
    """Named preset with published dimensions (tiny and 125m are longctx's own small models)."""
    layers: int | None = Field(None, ge=1, le=1024)
    """Transformer blocks (explicit dimensions only)."""
    hidden: int | None = Field(None, ge=8, le=131072)
    """Model width (explicit dimensions only)."""
    heads: int | None = Field(None, ge=1, le=1024)
    """Query attention heads; must divide hidden (explicit dimensions only)."""
    kv_heads: int | None = Field(None, ge=1, le=1024)
    """Key/value heads for grouped-query attention; must divide heads (explicit dimensions only)."""
    ffn: int | None = Field(None, ge=1, le=1048576)
    """SwiGLU inner width (explicit dimensions only)."""
    vocab: int | None = Field(None, ge=2, le=4194304)
    """Vocabulary size (explicit dimensions only)."""
    tie_embeddings: bool | None = None
    """Share the input embedding with the output projection (explicit dimensions only; unset: the
    trainer's default)."""
    rope_theta: float | None = Field(None, gt=0)
    """RoPE base frequency; default the preset's, or the trainer's default with explicit dimensions."""
    rope_scaling: RopeScalingSpec | None = None
    """RoPE frequency scaling; default the preset's (its published model's), none with explicit
    dimensions; factor 1 is none."""


class OptimizerSpec(ApiModel):
    """AdamW with linear warm-up, a decay schedule and global-norm gradient clipping."""

    learning_rate: float = Field(trainer_default(OptimizerConfig, "learning_rate"), gt=0, le=1)
    """Peak learning rate after warm-up."""
    warmup_steps: int = Field(trainer_default(OptimizerConfig, "warmup_steps"), ge=0, le=MAX_COUNT)
    """Steps of linear warm-up from zero."""
    weight_decay: float = Field(trainer_default(OptimizerConfig, "weight_decay"), ge=0, le=1)
    """Decoupled weight decay."""
    grad_clip: float = Field(trainer_default(OptimizerConfig, "grad_clip"), gt=0)
    """Global gradient-norm clip."""
    schedule: Schedule = trainer_default(OptimizerConfig, "schedule")
    """After warm-up: cosine decay to the schedule's floor fraction of the peak by the last step, or
    constant."""


class ParallelismSpec(ApiModel):
    """How the job's devices are split into data, context (sequence) and tensor parallel groups."""

    mode: Literal["auto", "manual"] = "auto"
    """auto: the planner chooses data/context/tensor; manual: you set all three and they are validated."""
    data: int | None = Field(None, ge=1, le=65536)
    """Data-parallel replicas (manual mode)."""
    context: int | None = Field(None, ge=1, le=65536)
    """Context-parallel group size: the sequence is split over this many devices (manual mode)."""
    tensor: int | None = Field(None, ge=1, le=64)
    """Tensor-parallel group size; must stay inside a node and divide heads and kvHeads (manual mode)."""
    processes_per_node: int | None = Field(None, ge=1, le=64)
    """JAX processes per pod (default 1; NVSHMEM needs one per GPU, so it defaults to gpusPerNode there)."""
    attention: ApiAttention = API_ATTENTION[DEFAULT_ATTENTION]
    """Context-parallel attention: ring (K/V rotate around the ring), allGather (K/V gathered once),
    ulysses (all-to-all from sequence to head shards; heads / tensor must divide by context), hybrid
    (Ulysses inside groups of `ulysses` devices, a ring over the groups), tokenRing (queries go
    around the ring and partial outputs come straight back, both link directions in use), or auto
    (the planner picks the fastest that fits; ring on CPU, which the planner does not model)."""
    ulysses: int | None = Field(None, ge=2, le=65536)
    """Ulysses group size of attention hybrid: divides context, below it; heads / tensor must divide
    by it. Omitted: the planner picks it (GPU jobs; CPU jobs must set it)."""
    load_balance: ApiLoadBalance = AUTO
    """Causal load balancing: dualChunkSwap gives device i chunks i and 2C-1-i; striped interleaves
    tokens; documents places packed documents by mirrored block pairs, per batch, so the work
    under the document mask is even and blocks still hold one document (needs
    data.packing.documentMask; docs/attention.md); auto is documents with
    data.packing.documentMask (unless adaptive), else dualChunkSwap (status.layout.loadBalance)."""
    adaptive: bool = trainer_default(ParallelConfig, "adaptive")
    """Per-batch adaptive context parallelism: documents up to half a device's shard are attended
    on one device, only longer ones over the ring, whose size per batch is one of a few compiled
    variants (needs data.packing.documentMask, attention ring, loadBalance dualChunkSwap or auto, no
    offload, and sequenceLength / context divisible by 32; docs/attention.md)."""


class OffloadSpec(ApiModel):
    """FPDT-style sequence chunking with idle K/V chunks and saved activations in host memory."""

    enabled: bool | None = None
    """Offload to host memory; omitted means the planner enables it only when needed to fit."""
    chunk_tokens: int | None = Field(None, ge=128, le=16777216)
    """Tokens per chunk on each device; omitted means the planner sizes it so compute hides transfer."""


class Fp8Spec(ApiModel):
    """FP8 matmuls (precision fp8): per-tensor delayed scaling."""

    amax_history: int = Field(trainer_default(Fp8Config, "amax_history"), ge=1, le=1024)
    """Uses of a tensor whose largest magnitude sets its next FP8 scale (Transformer Engine's
    amax_history_len)."""
    lm_head: bool = trainer_default(Fp8Config, "lm_head")
    """The LM head's matmul in FP8 too; off (the default) keeps it in bf16, where FP8 costs the
    most accuracy."""


class CommunicationSpec(ApiModel):
    """Collective implementation for the ring's collective-permutes."""

    collective_permute: CollectivePermute = "nccl"
    """nvshmem turns on XLA's NVSHMEM collectives; it needs one GPU per process and an RDMA fabric."""
    nvshmem_symmetric_size: str = Field("4G", pattern=r"^[0-9]+[KMGT]?$", max_length=16)
    """NVSHMEM_SYMMETRIC_SIZE: symmetric heap per process, e.g. 4G."""


class ResourcesSpec(ApiModel):
    """Nodes, accelerators and pod resources. Each node runs one pod."""

    nodes: int = Field(1, ge=1, le=4096)
    """Nodes (pods) in the gang."""
    gpus_per_node: int = Field(8, ge=1, le=16)
    """GPUs per node (for gpuType cpu: emulated XLA host devices per pod)."""
    gpu_type: GpuType = "h100-80gb"
    """Accelerator; selects nodes by the GPU Feature Discovery product label. cpu runs on CPU devices."""
    shared_memory: str = Field("64Gi", pattern=QUANTITY_PATTERN, max_length=32)
    """Size of the /dev/shm memory volume (NCCL and data loaders need a large one); capped at the
    pod's memory limit, which its pages count against."""
    cpu: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=32)
    """CPU request and limit per pod, e.g. "96". gpuType cpu: default the operator's cpuJobCpu."""
    memory: str | None = Field(None, pattern=QUANTITY_PATTERN, max_length=32)
    """Memory request and limit per pod, e.g. 1800Gi. Host offload lives here: when set, the planner
    rejects layouts whose offloaded tensors exceed its host-memory margin of it. gpuType cpu: default
    the operator's cpuJobMemory."""


class RackSpec(ApiModel):
    """The fabric beyond a rack (or any switch domain the nodes share), for the planner's step time
    only: nothing is scheduled by it (scheduling.topologyKey keeps a gang in one)."""

    nodes: int = Field(ge=1, le=4096)
    """Nodes per rack. The planner lays the gang's nodes into racks of this many, in order (as a
    topology-aware placement by the rack label would)."""
    oversubscription: float = Field(1.0, ge=1.0, le=64.0)
    """The rack's uplinks carry 1/oversubscription of its nodes' fabric bandwidth (3 for 3:1)."""


class NetworkSpec(ApiModel):
    """Inter-node fabric; each fabric profile sets its resources, annotations and NCCL/NVSHMEM env."""

    fabric: FabricName = "tcp"
    """tcp, infiniband or roce (NVIDIA Network Operator), efa (AWS), gcp-tcpx (A3 High),
    gcp-tcpxo (A3 Mega), gcp-rdma (A3 Ultra)."""
    rdma_resource: str | None = Field(None, max_length=EXTENDED_RESOURCE_MAX_LENGTH, pattern=EXTENDED_RESOURCE_PATTERN)
    """Extended resource of the RDMA device plugin (infiniband/roce; default the shared device
    plugin's): <domain>/<name>, outside kubernetes.io, never an nvidia.com/gpu resource."""
    rdma_resource_count: int = Field(1, ge=1, le=64)
    """How many of rdmaResource each pod requests."""
    networks: list[Annotated[str, StringConstraints(pattern=DNS_LABEL_PATTERN, max_length=63)]] = Field(
        default_factory=list, max_length=16
    )
    """Secondary networks: Multus NetworkAttachmentDefinitions of the job's own namespace
    (infiniband/roce) or GKE network names (gcp-*), in NIC order."""
    hcas: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+(:[0-9]+)?$", max_length=64)]] = Field(
        default_factory=list, max_length=32
    )
    """HCA ports for NCCL_IB_HCA / NVSHMEM_HCA_LIST, e.g. mlx5_0:1."""
    socket_interface: str = Field("eth0", max_length=64, pattern=r"^[A-Za-z0-9_.:^=-]+$")
    """Interface for bootstrap sockets (NCCL_SOCKET_IFNAME, NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME)."""
    gid_index: int | None = Field(None, ge=0, le=255)
    """RoCE GID index (NCCL_IB_GID_INDEX); default the usual RoCE v2 index on roce."""
    efa_devices_per_node: int | None = Field(None, ge=1, le=64)
    """EFA interfaces per node (vpc.amazonaws.com/efa), e.g. 32 on p5.48xlarge; required for efa."""
    coordinator_port: int = Field(8476, ge=1024, le=65535)
    """Port of the JAX distributed coordinator on rank 0."""
    restart_port: int = Field(8477, ge=1024, le=65535)
    """Port of the in-place restart coordinator on rank 0's launcher (restartPolicy.inPlace only)."""
    rack: RackSpec | None = None
    """Racks and their uplinks' oversubscription; unset: every node reaches every other at the
    fabric's bandwidth."""


class Toleration(ApiModel):
    """A pod toleration, checked as Kubernetes checks it; the operator's allowedTolerations say which
    taint keys a job may tolerate."""

    key: QualifiedName
    """Taint key. Required: a key-less toleration tolerates every taint, the control plane's included."""
    operator: Literal["Exists", "Equal"] | None = None
    """Equal (the default) matches value; Exists matches any value and takes none."""
    value: LabelValue | None = None
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    """Taint effect to tolerate; omitted: every effect."""
    toleration_seconds: int | None = Field(None, ge=-MAX_COUNT, le=MAX_COUNT)
    """How long a NoExecute taint is tolerated (effect NoExecute only)."""


class SchedulingSpec(ApiModel):
    """Where and how the gang is admitted and placed."""

    admission: Literal["builtin", "kueue", "none"] = "builtin"
    """builtin: the operator waits until the whole gang fits; kueue: the Job is created suspended for
    Kueue; none: create immediately."""
    queue_name: str | None = Field(None, min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN)
    """Kueue LocalQueue (required for admission kueue)."""
    priority_class_name: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """PriorityClass of the pods."""
    node_selector: dict[QualifiedName, LabelValue] = Field(default_factory=dict, max_length=32)
    """Extra node labels the pods require."""
    tolerations: list[Toleration] = Field(default_factory=list, max_length=32)
    """Extra tolerations (nvidia.com/gpu is always tolerated on GPU jobs)."""
    topology_key: QualifiedName | None = "nvidia.com/gpu.clique"
    """Node label the gang prefers to share (NVLink clique, rack or block)."""
    kueue_topology: Literal["none", "preferred", "required"] = "none"
    """Kueue topology-aware scheduling over topologyKey (admission kueue): preferred or required asks
    Kueue to place the whole gang in one domain of that label (the queue's ResourceFlavor needs a
    Kueue Topology with it as a level); none leaves placement to the pods' affinity."""
    workload_priority_class_name: str | None = Field(None, max_length=63, pattern=DNS_SUBDOMAIN_PATTERN)
    """Kueue WorkloadPriorityClass (admission kueue): orders the queue, and a higher one may preempt
    a running lower one, which restarts from its checkpoint when admitted again. At most 63
    characters: it is the Job's kueue.x-k8s.io/priority-class label value."""
    startup_timeout_seconds: int = Field(600, ge=10, le=86400)
    """Pods must all be Running within this time, or the attempt counts as failed."""


class CheckpointSpec(ApiModel):
    """Orbax checkpoints; gang restarts resume from the latest one."""

    path: str = Field("/checkpoints", max_length=1024, pattern=PATH_PATTERN)
    """Directory (on the claim below) or object-store URL (gs://, s3://) for checkpoints."""
    interval_steps: int = Field(trainer_default(CheckpointConfig, "interval_steps"), ge=1, le=MAX_COUNT)
    """Steps between checkpoints."""
    persistent_volume_claim: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """PVC (ReadWriteMany) mounted at path; without one a local path is lost when the gang restarts."""
    preemption_grace_seconds: int | None = Field(None, ge=10, le=86400)
    """Seconds a pod gets after SIGTERM (its terminationGracePeriodSeconds) to finish its step and
    save the checkpoint every rank agrees on. Default: twice the planner's step time plus a
    checkpoint write at 1 GB/s per node, plus 30 s."""


class RestartPolicySpec(ApiModel):
    """Gang restarts: JAX cannot lose a process, so any failed rank restarts every rank."""

    max_restarts: int = Field(3, ge=0, le=1000)
    """Gang restarts before the job is Failed."""
    backoff_seconds: int = Field(30, ge=0, le=3600)
    """Wait before creating the next generation: at least 1 s, doubling with each gang restart up to
    10 minutes (or this value, if longer)."""
    max_stall_restarts: int = Field(3, ge=0, le=1000)
    """Gang restarts for a stall (hangDetection) before the job is Failed; counted apart from
    maxRestarts."""
    node_lost_seconds: int = Field(10, ge=0, le=3600)
    """Seconds a rank's pod stays on a NotReady or unreachable node before it is evicted and the
    gang restarts on other nodes (Kubernetes' default is 300 s); the node is first noticed after the
    control plane's node-monitor grace period (about 40 s)."""
    on_straggler: bool = False
    """Also restart the gang (counted as a stall restart) when a rank is a straggler."""
    in_place: bool = False
    """When a rank's trainer fails, first restart every rank's trainer processes inside the running
    pods (the bundled launcher's agreement, from the last checkpoint); the gang is restarted as
    without it when they do not agree or maxInPlaceRestarts are spent. Needs the bundled trainer."""
    max_in_place_restarts: int = Field(3, ge=0, le=1000)
    """In-place restarts per generation (counted by rank 0's launcher, so a gang restart starts
    the count again; not counted in maxRestarts; shown in status.progress.inPlaceRestarts)."""


class HangDetectionSpec(ApiModel):
    """Hang detection: the operator reads every rank's phase and step (the trainer's health
    metrics) and restarts a gang that stops advancing from its last checkpoint."""

    enabled: bool = True
    """Restart a stalled gang (off: the operator still reads and reports the ranks)."""
    step_factor: int = Field(10, ge=2, le=1000)
    """k: a gang none of whose ranks makes a step for k times the expected step time (the ranks'
    median, else the planner's estimate), or floorSeconds if longer, is Stalled."""
    floor_seconds: int = Field(300, ge=10, le=86400)
    """The shortest time without a step that counts as a stall."""
    startup_seconds: int = Field(1800, ge=10, le=86400)
    """Rendezvous and compiling together, from all ranks Running to the first step, may last this
    long (or k planned step times, if longer) before the gang is Stalled."""


class StragglerSpec(ApiModel):
    """Straggler attribution from every rank's compute probe time (its step time when a rank
    exports no probe)."""

    slower_percent: int = Field(50, ge=5, le=1000)
    """A rank whose probe (or step) time is above the gang's median by more than this percentage
    is slow."""
    window_seconds: int = Field(300, ge=10, le=86400)
    """A rank slow at every read for this long is a straggler (the Straggler condition)."""


class MetricsSpec(ApiModel):
    """The trainer's Prometheus exporter."""

    port: int = Field(trainer_default(MetricsConfig, "port"), ge=1024, le=65000)
    """Port of the first trainer process's Prometheus exporter in each pod; process l of a pod
    listens on port + l (rank 0 is read for status.progress)."""


class PackingSpec(ApiModel):
    """Many documents packed into each sequence, split at a separator token."""

    document_mask: bool = trainer_default(PackingConfig, "document_mask")
    """Attention stays within each document (chunk pairs of different documents are skipped), and
    the loss leaves out the prediction across a document boundary."""
    reset_positions: bool = trainer_default(PackingConfig, "reset_positions")
    """RoPE positions restart at 0 at the start of each document."""
    separator: int | None = Field(None, ge=0, le=2**31 - 1)
    """Token id that ends each document. Default: the end-of-text id that `longctx tokenize`
    recorded beside the token file (<path>.json), or byte 0 (NUL) for text, which ends each file of
    a text directory. Synthetic data needs one."""
    document_lengths: list[Annotated[int, Field(ge=1, le=16777216)]] | None = Field(
        None, min_length=1, max_length=LENGTH_SAMPLES
    )
    """A sample of the corpus's document lengths in tokens: `longctx tokenize` prints one (the
    quantiles of the lengths it wrote, also `document_lengths` in <path>.json). With it the planner
    times adaptive context parallelism's steps (parallelism.adaptive: the layout it picks, the step
    and tokens/s), and `longctx plan` shows the bytes it sends over the context axis against the
    fixed ring's (docs/planner.md)."""


class DataSpec(ApiModel):
    """Training data."""

    kind: DataKind = trainer_default(DataConfig, "kind")
    """synthetic tokens, a memory-mapped token file, or raw text tokenised byte-level."""
    path: str | None = Field(None, max_length=1024, pattern=PATH_PATTERN)
    """Path inside the pod to the token file or text (required unless synthetic)."""
    packing: PackingSpec = PackingSpec()
    """Packed documents: document mask and per-document positions (off by default)."""


class InitFromSpec(ApiModel):
    """Published weights to start from: a Hugging Face Llama checkpoint directory (config.json and
    *.safetensors, bf16/f16/f32). Used only while the job has no checkpoint of its own; its
    dimensions must be the model's (RoPE settings may differ: that is how context is extended)."""

    path: str = Field(max_length=1024, pattern=PATH_PATTERN)
    """Directory inside the pod (on the claim below); object-store URLs are not read."""
    persistent_volume_claim: str | None = Field(None, max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """PVC holding the checkpoint, mounted read-only at path (ReadOnlyMany or ReadWriteMany)."""


class EnvVar(ApiModel):
    name: str = Field(max_length=256, pattern=r"^[A-Za-z_][A-Za-z0-9_.-]*$")
    """Variable name; the operator's own (JAX distributed identity, XLA_FLAGS, LONGCTX_*) are reserved."""
    value: str = Field("", max_length=32768)
    """Any text, passed verbatim."""


class TrainerSpec(ApiModel):
    """Bring your own trainer: the framework it is written in and how to start it. Absent: the
    bundled JAX trainer. The layout is planned all the same and reaches the container as
    environment (docs/operator.md, "Bring your own trainer")."""

    framework: Literal["jax", "pytorch"] = "jax"
    """jax: JAX distributed env (JAX_COORDINATOR_ADDRESS, ...); pytorch: torch.distributed env://
    and torchrun's (MASTER_ADDR, WORLD_SIZE, NODE_RANK, PET_*...), one process per GPU."""
    image: str | None = Field(None, max_length=512, pattern=IMAGE_PATTERN)
    """Image holding the trainer; default spec.image, then the operator's trainer image."""
    command: list[Annotated[str, StringConstraints(max_length=4096)]] | None = Field(None, min_length=1, max_length=64)
    """Container command (e.g. [torchrun]); required for pytorch. Default: the bundled JAX trainer."""
    args: list[Annotated[str, StringConstraints(max_length=4096)]] = Field(default_factory=list, max_length=256)
    """Container arguments, passed verbatim."""


class LongContextJobSpec(ApiModel):
    """A long-context training job: model, sequence, layout, fabric and lifecycle."""

    image: str | None = Field(None, max_length=512, pattern=IMAGE_PATTERN)
    """Trainer image; defaults to the operator's configured trainer image."""
    trainer: TrainerSpec | None = None
    """Bring your own trainer (PyTorch or JAX) instead of the bundled JAX one."""
    model: ModelSpec
    """Model preset or dimensions. Immutable: checkpoints depend on it."""
    sequence_length: int = Field(ge=128, le=16777216)
    """Tokens per training sequence."""
    global_batch_tokens: int | None = Field(None, ge=128, le=MAX_COUNT)
    """Tokens per optimizer step across the job; default one sequence."""
    steps: int = Field(1000, ge=1, le=MAX_COUNT)
    """Optimizer steps."""
    optimizer: OptimizerSpec = OptimizerSpec()
    precision: Precision = trainer_default(TrainerConfig, "precision")
    """Compute precision (master weights and optimizer state stay fp32). fp8: the layer matmuls in
    FP8 (e4m3 forward, e5m2 gradients), activations and attention in bf16; GPUs with FP8 tensor
    cores only (H100, H200, B200), or cpu where it is emulated for testing."""
    fp8: Fp8Spec = Fp8Spec()
    parallelism: ParallelismSpec = ParallelismSpec()
    offload: OffloadSpec = OffloadSpec()
    communication: CommunicationSpec = CommunicationSpec()
    resources: ResourcesSpec = ResourcesSpec()
    network: NetworkSpec = NetworkSpec()
    scheduling: SchedulingSpec = SchedulingSpec()
    checkpoint: CheckpointSpec = CheckpointSpec()
    restart_policy: RestartPolicySpec = RestartPolicySpec()
    hang_detection: HangDetectionSpec = HangDetectionSpec()
    straggler_detection: StragglerSpec = StragglerSpec()
    metrics: MetricsSpec = MetricsSpec()
    data: DataSpec = DataSpec()
    init_from: InitFromSpec | None = None
    """Start from published weights instead of a random initialisation."""
    env: list[EnvVar] = Field(default_factory=list, max_length=64)
    """Extra environment variables for every trainer process."""
    suspend: bool = False
    """Suspend the job: running pods are deleted, it resumes from the last checkpoint when unset."""

    @property
    def gpus(self) -> int:
        return self.resources.nodes * self.resources.gpus_per_node

    @property
    def on_cpu(self) -> bool:
        """The job runs on XLA host devices (gpuType cpu), not on GPUs."""
        return self.resources.gpu_type == CPU

    @property
    def batch_tokens(self) -> int:
        return self.global_batch_tokens or self.sequence_length

    def trainer_attention(self) -> Attention | Auto:
        """parallelism.attention in the trainer's spelling; auto stays auto (the planner's choice)."""
        chosen = self.parallelism.attention
        return AUTO if chosen == AUTO else TRAINER_ATTENTION[chosen]

    def trainer_load_balance(self) -> LoadBalance:
        """The load balancing the trainer runs (its spelling): the spec's, or what auto resolves to:
        documents when the document mask is on (its work balance is 1.08 max/mean against
        dual-chunk-swap's 1.55-1.72, docs/attention.md), except with adaptive context parallelism,
        whose ring stream is laid out by dual-chunk-swap; dual-chunk-swap otherwise."""
        chosen = self.parallelism.load_balance
        if chosen != AUTO:
            return TRAINER_LOAD_BALANCE[chosen]
        if self.data.packing.document_mask and not self.parallelism.adaptive:
            return "documents"
        return DEFAULT_LOAD_BALANCE

    def processes_per_node(self) -> int:
        """Explicit value, else one per GPU with NVSHMEM, else one per pod."""
        if self.parallelism.processes_per_node:
            return self.parallelism.processes_per_node
        if self.communication.collective_permute == "nvshmem":
            return self.resources.gpus_per_node
        return 1


class ObjectMeta(BaseModel):
    """The part of metadata longctx reads; everything else passes through."""

    model_config = ConfigDict(extra="allow")
    name: str
    namespace: str | None = None


class LongContextJob(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    api_version: Literal[API_VERSION] = Field(alias="apiVersion")
    kind: Literal[KIND]
    metadata: ObjectMeta
    spec: LongContextJobSpec
    status: dict | None = None
