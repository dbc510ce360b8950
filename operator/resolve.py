"""From a validated spec to the layout to render: the planner for GPUs, the spec itself on CPU."""

from __future__ import annotations

import functools

from longctx_operator.planner import Plan, PlanError, PlanRequest, Rack, plan

from .api.quantity import parse_quantity
from .api.spec import LongContextJobSpec
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
        attention=spec.trainer_attention(),
        ulysses=p.ulysses,
        load_balance=spec.trainer_load_balance(),
        offload=spec.offload.enabled,
        chunk_tokens=spec.offload.chunk_tokens,
        host_memory_bytes=parse_quantity(spec.resources.memory) if spec.resources.memory else None,
        adaptive=p.adaptive,
        document_lengths=tuple(spec.data.packing.document_lengths or ()),
        rack=Rack(spec.network.rack.nodes, spec.network.rack.oversubscription) if spec.network.rack else None,
    )


@functools.lru_cache(maxsize=256)
def _plan(request: PlanRequest) -> Plan | PlanError:
    """Plans are pure, and some take seconds (an adaptive job's draw of its corpus's batches on
    many GPUs): the operator plans a spec in its thread pool first (reconciler.py), and its
    decision, on the event loop, finds the plan here, or the rejection (kept too: a rejected spec
    stays due for planning at every reconciliation)."""
    try:
        return plan(request)
    except PlanError as error:
        return error


def resolve_layout(spec: LongContextJobSpec) -> tuple[ResolvedLayout, Plan | None]:
    """The layout and, on GPUs, the plan that chose or validated it; raises PlanError."""
    if spec.on_cpu:  # CPU jobs are manual (a rule): the planner models GPUs only
        return ResolvedLayout.manual(spec), None
    chosen = _plan(plan_request(spec))
    if isinstance(chosen, PlanError):  # a fresh one: raising the kept one would grow its traceback
        raise PlanError(chosen.message, chosen.field)
    return ResolvedLayout.planned(spec, chosen), chosen
