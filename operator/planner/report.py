"""Human (text table) and machine (JSON-ready dict) renderings of a Plan, and of a CPU job's
manual layout, which no plan models. Choices are printed as a manifest spells them (allGather,
dualChunkSwap), so what the table shows can be written back into a job."""

from __future__ import annotations

import math

from longctx_trainer.contract.config import AUTO, Attention, Auto, LoadBalance
from longctx_trainer.contract.hardware import FABRICS, GIB, GPUS

from ..api.spec import API_ATTENTION, API_LOAD_BALANCE
from ..layout import ResolvedLayout
from .adaptive import AdaptiveSaving
from .layouts import Layout
from .plan import HOST_MEMORY_MARGIN, Candidate, Plan, host_bytes_per_pod
from .timing import Rack

_MEMORY_ROWS = (
    ("params", "params (compute copy)"),
    ("master_weights", "master weights (fp32)"),
    ("optimizer_moments", "Adam moments (fp32)"),
    ("gradients", "gradients"),
    ("gathered_params", "gathered params (ZeRO-3)"),
    ("activations", "activations"),
    ("attention_working_set", "attention working set"),
    ("embedding_lookup", "embedding lookup"),
)
_STEP_PARTS = (
    ("compute", "compute"),
    ("ring_exposed", "ring"),
    ("tensor_parallel", "TP"),
    ("zero_exposed", "ZeRO"),
    ("all_gather", "all-gather"),
    ("ulysses", "Ulysses"),
    ("offload_exposed", "offload"),
)


# The attention communication each kind cannot hide (StepTime fields; hybrid has both of its parts).
_ATTENTION_EXPOSED = {
    "ring": ("ring_exposed",),
    "all_gather": ("all_gather",),
    "ulysses": ("ulysses",),
    "hybrid": ("ring_exposed", "ulysses"),
    "token_ring": ("ring_exposed",),
}


def _attention(kind: Attention | Auto) -> str:
    """An attention kind (or auto) in the manifest's spelling (api/spec.py holds the map)."""
    return API_ATTENTION.get(kind, kind)


def _load_balance(scheme: LoadBalance) -> str:
    return API_LOAD_BALANCE[scheme]


def _gib(n: float) -> str:
    return f"{n / GIB:.2f}"


def _offload_text(offload: bool, chunk: int | None) -> str:
    return f"on, chunk {chunk} tokens" if offload else "off"


def _candidate_row(c: Candidate) -> str:
    offload = f"{c.chunk_tokens}" if c.offload else "-"
    gib = _gib(c.memory.total) if c.memory is not None else "-"
    speed = f"{c.tokens_per_second:,.0f}" if c.tokens_per_second else "-"
    mfu = f"{100 * c.mfu:.1f}%" if c.mfu is not None else "-"
    return (
        f"  {c.layout.data:>5} {c.layout.context:>7} {c.layout.tensor:>6} {_attention(c.attention):>10} "
        f"{offload:>8} {gib:>8} "
        f"{speed:>11} {mfu:>6}"
    )


_HEADER = (
    f"  {'data':>5} {'context':>7} {'tensor':>6} {'attention':>10} {'chunk':>8} {'GiB/GPU':>8} {'tokens/s':>11} "
    f"{'MFU':>6}"
)


def _attention_kinds(plan: Plan) -> list[str]:
    """auto: every kind on the chosen layout, with the attention communication it leaves exposed."""
    if plan.request.attention != AUTO:
        return []
    lines = ["", f"Attention kinds on {plan.chosen.layout} (auto keeps the fastest):"]
    lines.append(f"  {'kind':<11} {'step s':>8} {'exposed attention comm s':>25} {'GiB/GPU':>8}")
    for c in (c for c in plan.candidates if c.layout == plan.chosen.layout):
        if not c.fits:
            lines.append(f"  {_attention(c.attention):<11} rejected: " + "; ".join(c.reasons))
            continue
        exposed = sum(getattr(c.step, part) for part in _ATTENTION_EXPOSED[c.attention])
        kind = f"hybrid U={c.ulysses}" if c.attention == "hybrid" else _attention(c.attention)
        lines.append(f"  {kind:<11} {c.step_seconds:>8.3f} {exposed:>25.3f} {_gib(c.memory.total):>8}")
    return lines


def _step_model(plan: Plan) -> list[str]:
    """With parallelism.adaptive: which step model timed the plan, and the fixed ring's step beside
    an adaptive one (docs/planner.md)."""
    req, c = plan.request, plan.chosen
    if c.fixed_step is not None:
        steps = sum(n for _, n in c.variant_mix)
        parts = ", ".join(f"{v.ring:,} tokens in {n}" for v, n in c.variant_mix)
        fixed = c.fixed_step.total
        return [
            f"Step model: adaptive context parallelism, the mean of {steps} steps drawn from "
            f"data.packing.documentLengths (ring part per device: {parts}); the fixed ring on this layout: "
            f"{fixed:.3f} s, {req.global_batch_tokens / fixed:,.0f} tokens/s"
        ]
    if not req.adaptive:
        return []
    why = "no data.packing.documentLengths" if not req.document_lengths else f"no adaptive draw on {c.layout}"
    return [f"Step model: the fixed ring ({why})"]


def _host_per_pod(plan: Plan) -> str:
    req = plan.request
    if not plan.chosen.offload:
        return ""
    text = f"  ({_gib(host_bytes_per_pod(req, plan.chosen.memory))} GiB per pod"
    if req.host_memory_bytes is None:
        return text + "; set resources.memory to check it)"
    return (
        text + f" of {_gib(req.host_memory_bytes * HOST_MEMORY_MARGIN)} usable, "
        f"{HOST_MEMORY_MARGIN:.0%} of resources.memory)"
    )


def _other_fitting(plan: Plan) -> list[Candidate]:
    """The fitting layouts besides the chosen one, fastest first."""
    others = [c for c in plan.candidates if c.fits and c.layout != plan.chosen.layout]
    return sorted(others, key=lambda c: c.step_seconds)


def faster_layouts(plan: Plan) -> list[Candidate]:
    """Fitting layouts faster than the chosen one, fastest first: only a pinned layout (manual, or
    axes fixed by `plan --data/--context/--tensor`) has any, since auto keeps the fastest."""
    return [c for c in _other_fitting(plan) if c.step_seconds < plan.step_seconds]


def _rack_text(rack: Rack | None) -> str:
    if rack is None:
        return ""
    return f"; racks of {rack.nodes} node{'s' if rack.nodes != 1 else ''}, uplinks {rack.oversubscription:g}:1"


def format_table(plan: Plan) -> str:
    req, c, m = plan.request, plan.chosen, plan.request.model
    mem = c.memory
    lines = [
        f"Model: {m.layers} layers, hidden {m.hidden}, heads {m.heads} (kv {m.kv_heads}), "
        f"ffn {m.ffn}, vocab {m.vocab}: {m.param_count():,} parameters",
        f"Job: sequence {req.sequence_length:,} tokens, batch {req.global_batch_tokens:,} tokens "
        f"({req.batch_sequences} sequence{'s' if req.batch_sequences != 1 else ''}), "
        f"{req.precision}, "
        f"{f'recompute (remat policy {c.remat_policy})' if req.recompute else 'no recompute'}",
        f"Hardware: {req.nodes} nodes x {req.gpus_per_node} {req.gpu} = {req.devices} GPUs "
        f"({GPUS[req.gpu].host_link} to the host); fabric {req.fabric}: "
        f"{FABRICS[req.fabric].description}{_rack_text(req.rack)}",
        "",
        f"Chosen layout: {c.layout}  ({plan.explanation})",
        f"Attention: {_attention(c.attention)}"
        f"{f' (Ulysses groups of {c.ulysses})' if c.attention == 'hybrid' else ''}"
        f"{' (auto)' if req.attention == AUTO else ''}, "
        f"load balance {_load_balance(req.load_balance)}; offload: "
        f"{_offload_text(c.offload, c.chunk_tokens)}",
        "",
        "Memory per GPU (GiB):",
    ]
    lines += [f"  {label:<26}{_gib(getattr(mem, name)):>8}" for name, label in _MEMORY_ROWS]
    if mem.fp8_scaling:
        lines += [f"  {'FP8 scaling state':<26}{_gib(mem.fp8_scaling):>8}"]
    lines += [
        f"  {'total':<26}{_gib(mem.total):>8}  of {_gib(mem.usable)} usable "
        f"({req.memory_margin:.0%} of {_gib(mem.capacity)}); peak in the {mem.peak_phase}",
        "  (the embedding lookup is never alive with the activations and attention working set: the larger counts)",
        f"  {'host offloaded':<26}{_gib(mem.host_offloaded):>8}" + _host_per_pod(plan),
        "",
        f"FLOPs per token: {plan.flops_per_token.causal:.4g} (6N + 6*L*H*Q*T, causal); "
        f"{plan.flops_per_token.full:.4g} (6N + 12*L*H*Q*T)",
        f"Step: {plan.step_seconds:.3f} s = "
        + ", ".join(f"{label} {getattr(c.step, name):.3f}" for name, label in _STEP_PARTS),
        f"Estimated: {c.tokens_per_second:,.0f} tokens/s, MFU {100 * c.mfu:.1f}% (causal), "
        f"{100 * plan.mfu_full_attention:.1f}% (12*L*H*Q*T)",
    ]
    lines += _step_model(plan)
    lines += _attention_kinds(plan)
    faster = faster_layouts(plan)
    if faster:
        lines += ["", "Faster layouts that fit (the pinned layout is slower):", _HEADER]
        lines += [_candidate_row(c) for c in faster]
    slower = [c for c in _other_fitting(plan) if c not in faster]
    if slower:
        lines += ["", "Other layouts that fit (slower):", _HEADER]
        lines += [_candidate_row(c) for c in slower]
    rejected = [c for c in plan.candidates if not c.fits]
    if rejected:
        several = len(req.attention_kinds) > 1
        lines += ["", "Rejected layouts:"]
        lines += [
            f"  {c.layout}{f' {_attention(c.attention)}' if several else ''}: " + "; ".join(c.reasons) for c in rejected
        ]
    return "\n".join(lines) + "\n"


def _memory_json(mem) -> dict:
    out = {name: getattr(mem, name) for name, _ in _MEMORY_ROWS} | {"fp8_scaling": mem.fp8_scaling}
    out = {_camel(k): v for k, v in out.items()}
    out.update(total=mem.total, usable=mem.usable, capacity=mem.capacity, hostOffloaded=mem.host_offloaded)
    return {"bytes": out, "gib": {k: round(v / GIB, 3) for k, v in out.items()}, "peakPhase": mem.peak_phase}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _layout_json(layout: Layout | ResolvedLayout) -> dict:
    return {"data": layout.data, "context": layout.context, "tensor": layout.tensor}


def _candidate_json(c: Candidate) -> dict:
    return {
        "layout": _layout_json(c.layout),
        "attention": _attention(c.attention),
        "ulysses": c.ulysses,
        "fits": c.fits,
        "offload": c.offload,
        "chunkTokens": c.chunk_tokens,
        "memoryPerGPU": c.memory.total if c.memory is not None else None,
        "stepSeconds": c.step_seconds,
        "tokensPerSecond": c.tokens_per_second,
        "mfu": c.mfu,
        "reasons": [{"field": r.field, "message": r.message} for r in c.rejections],
    }


def to_json(plan: Plan) -> dict:
    req, c, f = plan.request, plan.chosen, plan.flops_per_token
    return {
        "layout": _layout_json(c.layout),
        "explanation": plan.explanation,
        "attention": _attention(c.attention),
        "ulysses": c.ulysses,
        "attentionRequested": _attention(req.attention),
        "loadBalance": _load_balance(req.load_balance),
        "offload": c.offload,
        "chunkTokens": c.chunk_tokens,
        "memory": _memory_json(c.memory),
        "flopsPerToken": {
            "causal": f.causal,
            "full": f.full,
            "dense": f.dense,
            "attentionCausal": f.attention_causal,
            "attentionFull": f.attention_full,
        },
        "stepSeconds": plan.step_seconds,
        "step": {_camel(name): getattr(c.step, name) for name, _ in _STEP_PARTS},
        "stepModel": _step_model_json(c),
        "tokensPerSecond": c.tokens_per_second,
        "mfu": c.mfu,
        "mfuFullAttention": plan.mfu_full_attention,
        "candidates": [_candidate_json(c) for c in plan.candidates],
    }


def _step_model_json(c: Candidate) -> dict:
    """The step model: `fixed` (the layout as planned), or `adaptive` with its drawn variants and
    the fixed ring's step."""
    if c.fixed_step is None:
        return {"kind": "fixed"}
    return {
        "kind": "adaptive",
        "variants": [{"ringTokens": v.ring, "localTokens": v.local, "steps": n} for v, n in c.variant_mix],
        "fixedRingStepSeconds": c.fixed_step.total,
    }


def format_unplanned(layout: ResolvedLayout, nodes: int) -> str:
    """A CPU job's layout: its manifest's, as written (the planner models GPUs only)."""
    return (
        f"Layout: data={layout.data} context={layout.context} tensor={layout.tensor}  "
        "(manual: gpuType cpu runs the layout as written; the planner models GPUs only)\n"
        f"Attention: {_attention(layout.attention)}"
        f"{f' (Ulysses groups of {layout.ulysses})' if layout.attention == 'hybrid' else ''}, "
        f"load balance {_load_balance(layout.load_balance)}; "
        f"offload: {_offload_text(layout.offload, layout.chunk_tokens)}\n"
        f"{_count(nodes, 'pod')}, {_count(layout.processes_per_node, 'process')} each, "
        f"{_count(layout.devices // (nodes * layout.processes_per_node), 'CPU device')} per process\n"
    )


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 'es' if noun.endswith('s') else 's'}"


def unplanned_json(layout: ResolvedLayout) -> dict:
    return {
        "layout": _layout_json(layout),
        "explanation": "manual layout (gpuType cpu: not planned)",
        "attention": _attention(layout.attention),
        "ulysses": layout.ulysses,
        "loadBalance": _load_balance(layout.load_balance),
        "offload": layout.offload,
        "chunkTokens": layout.chunk_tokens,
        "processesPerNode": layout.processes_per_node,
    }


def format_against_bf16(fp8: Plan, bf16: Plan | None) -> str:
    """What precision fp8 changes: the same request planned in bf16 (None: it does not fit)."""
    head = "Against bf16 (the same job planned in bf16):"
    if bf16 is None:
        return f"{head} bf16 does not fit on these GPUs; fp8 does\n"
    old, new = bf16.chosen, fp8.chosen
    return (
        f"{head}\n"
        f"  layout {old.layout} -> {new.layout}; step {bf16.step_seconds:.3f} s -> {fp8.step_seconds:.3f} s "
        f"({bf16.step_seconds / fp8.step_seconds:.2f}x); tokens/s {old.tokens_per_second:,.0f} -> "
        f"{new.tokens_per_second:,.0f}\n"
        f"  memory per GPU {_gib(old.memory.total)} -> {_gib(new.memory.total)} GiB; MFU (bf16 peak, causal) "
        f"{100 * old.mfu:.1f}% -> {100 * new.mfu:.1f}%\n"
    )


def against_bf16_json(fp8: Plan, bf16: Plan | None) -> dict:
    if bf16 is None:
        return {"fits": False}
    return {
        "fits": True,
        "layout": _layout_json(bf16.chosen.layout),
        "stepSeconds": bf16.step_seconds,
        "tokensPerSecond": bf16.chosen.tokens_per_second,
        "memoryPerGPU": bf16.chosen.memory.total,
        "speedup": bf16.step_seconds / fp8.step_seconds,
    }


def format_adaptive(saving: AdaptiveSaving) -> str:
    """`longctx plan`'s lines on adaptive context parallelism for the job's document lengths."""
    parts = ", ".join(f"{ring:,} tokens in {n}" for ring, n in saving.ring_parts)
    ratio = "no ring at all" if saving.ratio == math.inf else f"{saving.ratio:.2f}x fewer"
    verb = "moves" if saving.enabled else "would move (parallelism.adaptive is off)"
    return (
        f"Adaptive context parallelism {verb} {_gib(saving.adaptive_bytes)} GiB per GPU and step over the "
        f"context axis against the fixed ring's {_gib(saving.fixed_bytes)} GiB: {ratio}\n"
        f"  (data.packing.documentLengths, {saving.steps} steps drawn; ring part per device: {parts})\n"
    )


def adaptive_json(saving: AdaptiveSaving) -> dict:
    return {
        "enabled": saving.enabled,
        "fixedBytesPerStep": saving.fixed_bytes,
        "adaptiveBytesPerStep": saving.adaptive_bytes,
        "ratio": None if saving.ratio == math.inf else saving.ratio,
        "stepsDrawn": saving.steps,
        "ringParts": [{"ringTokens": ring, "steps": n} for ring, n in saving.ring_parts],
    }
