"""The layout step: plan a new or changed spec, and convert the layout to and from the status."""

from __future__ import annotations

from longctx_trainer.contract.config import DEFAULT_REMAT_POLICY

from .. import conditions, reasons
from ..api.advice import advice
from ..api.spec import (
    API_ATTENTION,
    API_LOAD_BALANCE,
    API_REMAT_POLICY,
    TRAINER_ATTENTION,
    TRAINER_LOAD_BALANCE,
    TRAINER_REMAT_POLICY,
    LongContextJobSpec,
)
from ..api.status import LayoutStatus
from ..layout import ResolvedLayout
from ..planner import Plan, PlanError
from ..resolve import resolve_layout, unplanned_attention
from .decision import Event
from .draft import Draft

UNPLANNED_EXPLANATION = "manual layout taken as written (gpuType cpu: the planner models GPUs only)"


def layout_status(spec: LongContextJobSpec, layout: ResolvedLayout, plan: Plan | None) -> LayoutStatus:
    return LayoutStatus(
        data=layout.data,
        context=layout.context,
        tensor=layout.tensor,
        processes_per_node=layout.processes_per_node,
        processes=spec.resources.nodes * layout.processes_per_node,
        offload=layout.offload,
        chunk_tokens=layout.chunk_tokens,
        attention=API_ATTENTION[layout.attention],
        ulysses=layout.ulysses if layout.attention == "hybrid" else None,
        load_balance=API_LOAD_BALANCE[layout.load_balance],
        remat_policy=API_REMAT_POLICY[layout.remat_policy],
        memory_per_gpu=f"{plan.memory.total / 2**30:.1f}Gi" if plan else None,
        estimated_tokens_per_second=round(plan.tokens_per_second, 1) if plan else None,
        explanation=plan.explanation if plan else UNPLANNED_EXPLANATION,
    )


def resolved(layout: LayoutStatus, spec: LongContextJobSpec) -> ResolvedLayout:
    """The recorded layout to render again; a status from before attention was recorded runs the spec's."""
    attention = TRAINER_ATTENTION[layout.attention] if layout.attention else unplanned_attention(spec)
    return ResolvedLayout(
        data=layout.data,
        context=layout.context,
        tensor=layout.tensor,
        processes_per_node=layout.processes_per_node,
        offload=layout.offload,
        chunk_tokens=layout.chunk_tokens,
        attention=attention,
        ulysses=layout.ulysses or spec.parallelism.ulysses or 1,
        step_seconds=spec.batch_tokens / layout.estimated_tokens_per_second
        if layout.estimated_tokens_per_second
        else None,
        remat_policy=TRAINER_REMAT_POLICY[layout.remat_policy] if layout.remat_policy else DEFAULT_REMAT_POLICY,
        load_balance=TRAINER_LOAD_BALANCE[layout.load_balance] if layout.load_balance else spec.trainer_load_balance(),
    )


def plan(n: Draft, spec: LongContextJobSpec) -> bool:
    """Plans the layout for a new or changed spec; False when the planner rejects it."""
    if n.status.layout is not None and n.status.observed_generation == n.spec_generation:
        return next((c.status == "True" for c in n.status.conditions if c.type == conditions.LAYOUT_PLANNED), True)
    n.set(observed_generation=n.spec_generation)
    try:
        layout, chosen = resolve_layout(spec)
    except PlanError as e:
        n.condition(conditions.LAYOUT_PLANNED, False, reasons.PLAN_FAILED, str(e))
        return False
    status = layout_status(spec, layout, chosen)
    n.set(layout=status)
    n.condition(
        conditions.LAYOUT_PLANNED,
        True,
        reasons.PLANNED,
        f"data {layout.data} x context {layout.context} x tensor {layout.tensor}, "
        f"{status.processes} processes"
        + (f", offload chunks of {layout.chunk_tokens} tokens" if layout.offload and layout.chunk_tokens else ""),
    )
    n.events.extend(Event("Warning", a.reason, a.message) for a in advice(spec))
    return True
