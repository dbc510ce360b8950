"""From a validated spec to the layout to render: the planner for GPUs, the spec itself on CPU."""

from __future__ import annotations

from longctx_operator.planner import Plan, PlanRequest, plan
from longctx_operator.planner.plan import AUTO_ATTENTION
from longctx_trainer.contract.config import Attention

from .api.quantity import parse_quantity
from .api.spec import TRAINER_ATTENTION, LongContextJobSpec
from .layout import ResolvedLayout
from .model import model_config


def plan_request(spec: LongContextJobSpec) -> PlanRequest:
    p = spec.parallelism
    return PlanRequest(
        model=model_config(spec.model),
        sequence_length=spec.sequence_length,
        global_batch_tokens=spec.batch_tokens,
        nodes=spec.resources.nodes,
        gpus_per_node=spec.resources.gpus_per_node,
        gpu=spec.resources.gpu_type,
        fabric=spec.network.fabric,
        precision=spec.precision,
        data=p.data,
        context=p.context,
        tensor=p.tensor,
        attention=p.attention if p.attention == AUTO_ATTENTION else TRAINER_ATTENTION[p.attention],
        ulysses=p.ulysses,
        load_balance=spec.trainer_load_balance(),
        offload=spec.offload.enabled,
        chunk_tokens=spec.offload.chunk_tokens,
        host_memory_bytes=parse_quantity(spec.resources.memory) if spec.resources.memory else None,
        adaptive=p.adaptive,
        document_lengths=tuple(spec.data.packing.document_lengths or ()),
    )


def unplanned_attention(spec: LongContextJobSpec) -> Attention:
    """The attention kind where no planner chooses it (CPU jobs): auto means ring there."""
    attention = spec.parallelism.attention
    return "ring" if attention == AUTO_ATTENTION else TRAINER_ATTENTION[attention]


def resolve_layout(spec: LongContextJobSpec) -> tuple[ResolvedLayout, Plan | None]:
    """The layout and, on GPUs, the plan that chose or validated it; raises PlanError."""
    ppn = spec.processes_per_node()
    if spec.on_cpu:
        p = spec.parallelism  # CPU jobs are manual (a rule): the planner models GPUs only
        layout = ResolvedLayout(
            data=p.data,
            context=p.context,
            tensor=p.tensor,
            processes_per_node=ppn,
            offload=bool(spec.offload.enabled),
            chunk_tokens=spec.offload.chunk_tokens,
            attention=unplanned_attention(spec),
            ulysses=p.ulysses or 1,
            load_balance=spec.trainer_load_balance(),
        )
        return layout, None
    chosen = plan(plan_request(spec))
    layout = ResolvedLayout(
        data=chosen.layout.data,
        context=chosen.layout.context,
        tensor=chosen.layout.tensor,
        processes_per_node=ppn,
        offload=chosen.offload,
        chunk_tokens=chosen.chunk_tokens,
        attention=chosen.attention,
        ulysses=chosen.ulysses,
        step_seconds=spec.batch_tokens / chosen.tokens_per_second,
        remat_policy=chosen.remat_policy,
        load_balance=chosen.request.load_balance,
    )
    return layout, chosen
