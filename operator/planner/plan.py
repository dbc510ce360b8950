"""Choosing a layout: evaluate every candidate, pick the fastest that fits, explain the rest."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import get_args

from longctx_trainer.contract.adaptive import SHARD_MULTIPLE, shard_fits
from longctx_trainer.contract.config import (
    AUTO,
    DEFAULT_ATTENTION,
    DEFAULT_LOAD_BALANCE,
    DEFAULT_REMAT_POLICY,
    Attention,
    Auto,
    LoadBalance,
    Precision,
    RematPolicy,
)
from longctx_trainer.contract.flops import FlopsPerToken, flops_per_token
from longctx_trainer.contract.hardware import FABRICS, GIB, GPUS
from longctx_trainer.contract.model import ModelConfig

from .adaptive import VariantMix, expected_step, variant_mix
from .chunking import MIN_CHUNK_TOKENS, chunk_candidates, covering_chunk_tokens
from .layouts import Layout, Rejection, divisors, enumerate_layouts, structural_rejections
from .memory import MemoryBreakdown, MemoryInputs, memory_breakdown
from .timing import Rack, StepInputs, StepTime, step_time

# Offloaded tensors may take this fraction of a pod's memory limit; the rest is for the Python
# process, the runtime's own host buffers, data loading and the page cache of checkpoints.
HOST_MEMORY_MARGIN = 0.8
ATTENTION_KINDS: tuple[Attention, ...] = get_args(Attention)
"""What `attention: auto` plans, in this order of preference on a tie: it keeps the fastest
layout-and-kind that fits."""


class PlanError(ValueError):
    """No layout can run, or the requested one cannot; `field` is the camelCase spec path."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.message = message
        self.field = field

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


@dataclass(frozen=True)
class PlanRequest:
    model: ModelConfig
    sequence_length: int
    global_batch_tokens: int
    nodes: int
    gpus_per_node: int
    gpu: str
    fabric: str
    precision: Precision = "bf16"
    data: int | None = None  # None = planner decides; all three set = manual layout
    context: int | None = None
    tensor: int | None = None
    attention: Attention | Auto = DEFAULT_ATTENTION
    ulysses: int | None = None  # hybrid's Ulysses group size; None = planner decides
    load_balance: LoadBalance = DEFAULT_LOAD_BALANCE
    offload: bool | None = None  # None = only when needed to fit
    chunk_tokens: int | None = None  # None = chunk rule
    recompute: bool = True
    remat_policy: RematPolicy | None = None  # with recompute; None: save_attention where it fits, else full
    memory_margin: float = 0.9  # use at most this fraction of HBM
    host_memory_bytes: float | None = None  # per pod (resources.memory); None: not checked
    adaptive: bool = False  # parallelism.adaptive: with document_lengths, ring steps are timed by adaptive.py
    document_lengths: tuple[int, ...] = ()  # data.packing.documentLengths: a sample; () = none given
    rack: Rack | None = None  # network.rack: None = no rack level

    @property
    def devices(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def batch_sequences(self) -> int:
        return self.global_batch_tokens // self.sequence_length

    @property
    def manual(self) -> bool:
        return None not in (self.data, self.context, self.tensor)

    @property
    def attention_kinds(self) -> tuple[Attention, ...]:
        """The kinds to plan: the one named, or every kind for auto."""
        return ATTENTION_KINDS if self.attention == AUTO else (self.attention,)


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    attention: Attention = DEFAULT_ATTENTION
    ulysses: int = 1  # hybrid's Ulysses group size
    offload: bool = False
    chunk_tokens: int | None = None
    memory: MemoryBreakdown | None = None
    step: StepTime | None = None
    remat_policy: RematPolicy = DEFAULT_REMAT_POLICY  # the trainer's remat_policy for this candidate
    tokens_per_second: float | None = None
    mfu: float | None = None
    rejections: tuple[Rejection, ...] = ()
    variant_mix: VariantMix = ()  # adaptive context parallelism: `step` is the mean over these drawn steps
    fixed_step: StepTime | None = None  # then the fixed ring's step, for comparison

    @property
    def fits(self) -> bool:
        return not self.rejections

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(r.message for r in self.rejections)

    @property
    def step_seconds(self) -> float | None:
        return None if self.step is None else self.step.total


@dataclass(frozen=True)
class Plan:
    """The chosen candidate (it fits: its memory, step and speed are set) and how it was chosen."""

    request: PlanRequest
    chosen: Candidate  # its attention is the request's, or the one auto chose
    flops_per_token: FlopsPerToken
    mfu_full_attention: float  # 12*L*H*Q*T convention (the chosen candidate's mfu is causal)
    explanation: str
    candidates: list[Candidate] = field(default_factory=list)

    @property
    def step_seconds(self) -> float:
        return self.chosen.step.total


_CHOICES = {
    "precision": ("spec.precision", get_args(Precision)),
    "attention": ("spec.parallelism.attention", (*ATTENTION_KINDS, AUTO)),
    "load_balance": ("spec.parallelism.loadBalance", get_args(LoadBalance)),
}
_AXIS_FIELDS = {
    "data": "spec.parallelism.data",
    "context": "spec.parallelism.context",
    "tensor": "spec.parallelism.tensor",
}


def validate_request(req: PlanRequest) -> None:
    positives = (
        ("sequence_length", "spec.sequenceLength"),
        ("global_batch_tokens", "spec.globalBatchTokens"),
        ("nodes", "spec.resources.nodes"),
        ("gpus_per_node", "spec.resources.gpusPerNode"),
    )
    for name, path in positives:
        if getattr(req, name) < 1:
            raise PlanError(f"must be at least 1, got {getattr(req, name)}", path)
    if req.global_batch_tokens % req.sequence_length:
        raise PlanError(
            f"{req.global_batch_tokens} tokens is not a whole number of sequences of {req.sequence_length}",
            "spec.globalBatchTokens",
        )
    if req.gpu not in GPUS:
        raise PlanError(f"unknown GPU {req.gpu!r}; known: {', '.join(GPUS)}", "spec.resources.gpuType")
    if req.fabric not in FABRICS:
        raise PlanError(f"unknown fabric {req.fabric!r}; known: {', '.join(FABRICS)}", "spec.network.fabric")
    for name, (path, allowed) in _CHOICES.items():
        if getattr(req, name) not in allowed:
            raise PlanError(f"{getattr(req, name)!r} is not one of {', '.join(allowed)}", path)
    if req.precision == "fp8" and not GPUS[req.gpu].fp8_flops:
        raise PlanError(f"{req.gpu} has no FP8 tensor cores; use bf16", "spec.precision")
    for name, path in _AXIS_FIELDS.items():
        value = getattr(req, name)
        if value is not None and value < 1:
            raise PlanError(f"{name} must be at least 1, got {value}", path)
    if not 0 < req.memory_margin <= 1:
        raise PlanError(f"memory margin must be in (0, 1], got {req.memory_margin}", "memoryMargin")
    if req.host_memory_bytes is not None and req.host_memory_bytes <= 0:
        raise PlanError(f"must be positive, got {req.host_memory_bytes}", "spec.resources.memory")
    if req.rack is not None and req.rack.nodes < 1:
        raise PlanError(f"must be at least 1, got {req.rack.nodes}", "spec.network.rack.nodes")
    if req.rack is not None and req.rack.oversubscription < 1:
        raise PlanError(f"must be at least 1, got {req.rack.oversubscription}", "spec.network.rack.oversubscription")
    if req.chunk_tokens is not None:
        if req.chunk_tokens < 1:
            raise PlanError(f"must be at least 1, got {req.chunk_tokens}", "spec.offload.chunkTokens")
        if req.offload is False:
            raise PlanError("chunkTokens is set but offload is disabled", "spec.offload.chunkTokens")


def memory_for(req: PlanRequest, layout: Layout, chunk: int | None, save_attention: bool = False) -> MemoryBreakdown:
    """Bytes per GPU of `layout` for this request; chunk None means no offload; `save_attention`:
    remat policy save_attention."""
    return memory_breakdown(
        MemoryInputs(
            model=req.model,
            precision=req.precision,
            layout=layout,
            sequence_length=req.sequence_length,
            batch_sequences=req.batch_sequences,
            recompute=req.recompute,
            attention=req.attention,
            chunk_tokens=chunk,
            capacity=GPUS[req.gpu].hbm_bytes,
            factor=GPUS[req.gpu].memory_factor,
            margin=req.memory_margin,
            ulysses=req.ulysses or 1,
            save_attention=save_attention,
            adaptive=req.adaptive,
        )
    )


def host_bytes_per_pod(req: PlanRequest, memory: MemoryBreakdown) -> float:
    return memory.host_offloaded * req.gpus_per_node


def _host_memory_rejection(req: PlanRequest, memory: MemoryBreakdown) -> Rejection | None:
    """Offloaded tensors of every GPU of a pod must fit in its memory limit, with room to spare."""
    if req.host_memory_bytes is None:
        return None
    needed, usable = host_bytes_per_pod(req, memory), req.host_memory_bytes * HOST_MEMORY_MARGIN
    if needed <= usable:
        return None
    return Rejection(
        "spec.resources.memory",
        f"offloads {needed / GIB:.1f} GiB per pod to host memory > {usable / GIB:.1f} GiB "
        f"usable ({HOST_MEMORY_MARGIN:.0%} of resources.memory "
        f"{req.host_memory_bytes / GIB:.1f} GiB)",
    )


def _rejected(layout: Layout, req: PlanRequest, offload: bool, chunk: int | None, memory, rejection) -> Candidate:
    return Candidate(layout, req.attention, offload=offload, chunk_tokens=chunk, memory=memory, rejections=(rejection,))


def _attempt(req: PlanRequest, layout: Layout, chunk: int | None) -> Candidate:
    """Memory and, when it fits, speed of one layout with one offload setting: with recompute,
    the request's remat policy, or when it names none save_attention (attention's forward runs
    once) where its saved tensors fit, else full remat."""
    if req.recompute and req.remat_policy != "full":
        saving = _attempt_policy(req, layout, chunk, save_attention=True)
        if saving.fits or req.remat_policy == "save_attention":
            return saving
    return _attempt_policy(req, layout, chunk, save_attention=False)


def _attempt_policy(req: PlanRequest, layout: Layout, chunk: int | None, *, save_attention: bool) -> Candidate:
    memory = memory_for(req, layout, chunk, save_attention)
    offload = chunk is not None
    if not memory.fits:
        message = f"needs {memory.total / GIB:.1f} GiB per GPU > {memory.usable / GIB:.1f} GiB usable"
        if offload:
            message += f" even with offload (chunk {chunk} tokens)"
        rejection = Rejection("spec.resources.nodes", message)
        return _rejected(layout, req, offload, chunk, memory, rejection)
    if offload and (rejection := _host_memory_rejection(req, memory)) is not None:
        return _rejected(layout, req, offload, chunk, memory, rejection)
    gpu = GPUS[req.gpu]
    inputs = StepInputs(
        model=req.model,
        gpu=gpu,
        fabric=FABRICS[req.fabric],
        layout=layout,
        gpus_per_node=req.gpus_per_node,
        sequence_length=req.sequence_length,
        global_batch_tokens=req.global_batch_tokens,
        precision=req.precision,
        recompute=req.recompute,
        attention=req.attention,
        load_balance=req.load_balance,
        chunk_tokens=chunk,
        host_saved_bytes=memory.host_offloaded,
        ulysses=req.ulysses or 1,
        save_attention=save_attention,
        rack=req.rack,
    )
    step = fixed = step_time(inputs)
    mix = _adaptive_mix(req, layout, offload)
    if mix:
        step = expected_step(inputs, mix)
    flops = flops_per_token(req.model, req.sequence_length)
    mfu = flops.causal * req.global_batch_tokens / (step.total * layout.devices * gpu.bf16_flops)
    return Candidate(
        layout,
        req.attention,
        offload=offload,
        chunk_tokens=chunk,
        memory=memory,
        step=step,
        tokens_per_second=req.global_batch_tokens / step.total,
        mfu=mfu,
        remat_policy="save_attention" if save_attention else "full",
        variant_mix=mix,
        fixed_step=fixed if mix else None,
    )


def _adaptive_mix(req: PlanRequest, layout: Layout, offload: bool) -> VariantMix:
    """The variants adaptive context parallelism would take on this layout (adaptive.py), or ()
    where the step is the fixed ring's: adaptive off, no document lengths, attention other than
    ring, offload, or a layout the variants do not fit (context 1, shards not a multiple of 32)."""
    if not (req.adaptive and req.document_lengths and req.attention == "ring") or offload:
        return ()
    rows = max(1, req.batch_sequences // layout.data)
    return variant_mix(req.sequence_length, layout.context, rows, req.document_lengths) or ()


def _with_offload(req: PlanRequest, layout: Layout) -> Candidate:
    shard = req.sequence_length // layout.context
    if req.chunk_tokens is not None:
        if shard % req.chunk_tokens:
            return Candidate(
                layout,
                req.attention,
                offload=True,
                chunk_tokens=req.chunk_tokens,
                rejections=(
                    Rejection(
                        "spec.offload.chunkTokens",
                        f"chunkTokens={req.chunk_tokens} does not divide the per-device shard of {shard} tokens",
                    ),
                ),
            )
        return _attempt(req, layout, req.chunk_tokens)
    covering = covering_chunk_tokens(req.model, GPUS[req.gpu], req.precision)
    options = chunk_candidates(shard, covering)
    if not options:
        return Candidate(
            layout,
            req.attention,
            offload=True,
            rejections=(
                Rejection(
                    "spec.offload.chunkTokens",
                    f"offload needs a power-of-two chunk of at least "
                    f"{max(covering, MIN_CHUNK_TOKENS)} tokens (so its attention covers its host "
                    f"transfer) dividing the per-device shard of {shard} tokens",
                ),
            ),
        )
    for chunk in options:  # largest first
        candidate = _attempt(req, layout, chunk)
        if candidate.fits:
            return candidate
    return candidate


def evaluate(req: PlanRequest, layout: Layout) -> Candidate:
    """One layout with the request's attention kind (not auto): structural checks, then memory
    (offloading only when allowed), then speed. Hybrid without a group size tries every size that
    splits the context axis into real groups and a real ring, and keeps the fastest that fits."""
    if req.attention == "hybrid" and req.ulysses is None:
        sizes = [u for u in divisors(layout.context) if 1 < u < layout.context]
        if not sizes:
            reason = f"hybrid needs a Ulysses group size between 1 and context={layout.context}, dividing it"
            return Candidate(layout, "hybrid", rejections=(Rejection("spec.parallelism.context", reason),))
        tried = [evaluate(replace(req, ulysses=size), layout) for size in sizes]
        fitting = [c for c in tried if c.fits]
        return min(fitting, key=lambda c: c.step_seconds) if fitting else tried[0]
    candidate = _evaluate_kind(req, layout)
    return replace(candidate, ulysses=req.ulysses) if req.attention == "hybrid" else candidate


def _evaluate_kind(req: PlanRequest, layout: Layout) -> Candidate:
    rejections = structural_rejections(
        layout,
        model=req.model,
        sequence_length=req.sequence_length,
        batch_sequences=req.batch_sequences,
        gpus_per_node=req.gpus_per_node,
        load_balance=req.load_balance,
        attention=req.attention,
        ulysses=req.ulysses or 1,
    )
    if req.adaptive and not shard_fits(req.sequence_length, layout.context):  # contract.adaptive.variants
        shard = req.sequence_length // layout.context
        reason = (
            f"adaptive context parallelism needs sequenceLength / context divisible by {SHARD_MULTIPLE}, got {shard}"
        )
        rejections.append(Rejection("spec.parallelism.context", reason, auto_field="spec.sequenceLength"))
    if rejections:
        return Candidate(layout, req.attention, rejections=tuple(rejections))
    if req.offload is True or req.chunk_tokens is not None:
        return _with_offload(req, layout)
    without = _attempt(req, layout, None)
    if without.fits or req.offload is False or req.adaptive:  # the trainer runs adaptive layouts without offload
        return without
    offloaded = _with_offload(req, layout)
    if offloaded.fits:
        return offloaded
    return replace(offloaded, rejections=without.rejections + offloaded.rejections)


def _matches(req: PlanRequest, layout: Layout) -> bool:
    return all(getattr(req, axis) in (None, getattr(layout, axis)) for axis in _AXIS_FIELDS)


def _blame(req: PlanRequest, rejected: list[Candidate]) -> str:
    """The field to change when no layout is valid: the one reason every layout shares (for an
    axis the planner chose, the input that rules it out: a sequence length that no context
    divides is the sequence length's fault), else the first pinned axis, else the node count."""
    fixed = [axis for axis in _AXIS_FIELDS if getattr(req, axis) is not None]
    pinned = {_AXIS_FIELDS[axis] for axis in fixed}

    def blamed(r: Rejection) -> str:
        return r.auto_field if r.auto_field and r.field not in pinned else r.field

    shared = set.intersection(*({blamed(r) for r in c.rejections} for c in rejected))
    if shared:
        return next(blamed(r) for r in rejected[0].rejections if blamed(r) in shared)
    return _AXIS_FIELDS[fixed[0]] if fixed else "spec.resources.nodes"


def _choose(req: PlanRequest, candidates: list[Candidate]) -> tuple[Candidate, str]:
    if req.manual:
        layout = Layout(req.data, req.context, req.tensor)
        if layout.devices != req.devices:
            raise PlanError(
                f"data*context*tensor = {layout.devices} but the job has "
                f"{req.devices} GPUs ({req.nodes} nodes x {req.gpus_per_node})",
                "spec.parallelism",
            )
        kinds = [c for c in candidates if c.layout == layout]
        fitting = [c for c in kinds if c.fits]
        if not fitting:  # the first kind's last attempt (with offload, when allowed) names what to change
            chosen = kinds[0]
            raise PlanError(f"{layout}: " + "; ".join(chosen.reasons), chosen.rejections[-1].field)
        chosen = min(fitting, key=lambda c: (c.step_seconds, ATTENTION_KINDS.index(c.attention)))
        return chosen, "manual layout, validated" + (", fastest attention" if len(kinds) > 1 else "")
    eligible = [c for c in candidates if _matches(req, c.layout)]
    if not eligible:
        fixed = [axis for axis in _AXIS_FIELDS if getattr(req, axis) is not None]
        values = ", ".join(f"{axis}={getattr(req, axis)}" for axis in fixed)
        raise PlanError(f"no layout of {req.devices} GPUs has {values}", _AXIS_FIELDS[fixed[0]])
    fitting = [c for c in eligible if c.fits]
    if not fitting:
        measured = [c for c in eligible if c.memory is not None]
        if measured:
            best = min(measured, key=lambda c: c.memory.total)
            # Its last attempt (with offload, when allowed) names what to change.
            raise PlanError(
                f"no layout fits on {req.devices} x {req.gpu}; the smallest, {best.layout}, {best.reasons[-1]}",
                best.rejections[-1].field,
            )
        closest = sorted(eligible, key=lambda c: len(c.rejections))[:3]
        raise PlanError(
            f"none of the {len(eligible)} layouts of {req.devices} GPUs is valid, "
            f"e.g. " + " | ".join(f"{c.layout}: {'; '.join(c.reasons)}" for c in closest),
            _blame(req, eligible),
        )
    chosen = min(
        fitting,
        key=lambda c: (c.step_seconds, c.layout.tensor, c.layout.context, ATTENTION_KINDS.index(c.attention)),
    )
    how = "auto" if all(getattr(req, a) is None for a in _AXIS_FIELDS) else "constrained"
    noun = "layouts and attention kinds" if len(req.attention_kinds) > 1 else "layouts"
    return chosen, f"fastest of {len(fitting)} fitting {noun} ({how})"


def plan(req: PlanRequest) -> Plan:
    validate_request(req)
    candidates = [
        evaluate(replace(req, attention=kind), layout)
        for layout in enumerate_layouts(req.devices)
        for kind in req.attention_kinds
    ]
    chosen, explanation = _choose(req, candidates)
    flops = flops_per_token(req.model, req.sequence_length)
    peak = chosen.step.total * chosen.layout.devices * GPUS[req.gpu].bf16_flops
    return Plan(
        request=req,
        chosen=chosen,
        flops_per_token=flops,
        mfu_full_attention=flops.full * req.global_batch_tokens / peak,
        explanation=explanation,
        candidates=candidates,
    )
