"""The layout step: plan a new or changed spec and record the layout in the status."""

from __future__ import annotations

from .. import conditions, reasons
from ..api.advice import advice
from ..api.spec import LongContextJobSpec
from ..api.status import LongContextJobStatus
from ..planner import PlanError
from ..resolve import resolve_layout
from .decision import Event
from .draft import Draft


def planning_due(status: LongContextJobStatus, spec_generation: int) -> bool:
    """Whether the spec is new or changed since its layout was planned."""
    return status.layout is None or status.observed_generation != spec_generation


def plan(n: Draft, spec: LongContextJobSpec) -> bool:
    """Plans the layout for a new or changed spec; False when the planner rejects it."""
    if not planning_due(n.status, n.spec_generation):
        return next((c.status == "True" for c in n.status.conditions if c.type == conditions.LAYOUT_PLANNED), True)
    n.set(observed_generation=n.spec_generation)
    try:
        layout, chosen = resolve_layout(spec)
    except PlanError as e:
        n.condition(conditions.LAYOUT_PLANNED, False, reasons.PLAN_FAILED, str(e))
        return False
    status = layout.to_status(spec, chosen)
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
