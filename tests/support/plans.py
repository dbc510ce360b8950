"""Plan requests for the planner's tests: the reference case, changed by keyword."""

from __future__ import annotations

from longctx_operator.planner import PlanRequest
from longctx_trainer.contract.presets import PRESETS

REFERENCE = dict(
    model=PRESETS["llama3-8b"],
    sequence_length=262_144,
    global_batch_tokens=262_144,
    nodes=4,
    gpus_per_node=8,
    gpu="h100-80gb",
    fabric="infiniband",
)
"""llama3-8b, one 256K-token sequence per step on 4 nodes x 8 H100 over InfiniBand, layout chosen
by the planner (the worked example of docs/planner.md fixes it at data 1, context 8, tensor 4)."""

WORKED_LAYOUT = dict(data=1, context=8, tensor=4, remat_policy="full")  # its figures are for full remat


def plan_request(**changes) -> PlanRequest:
    """The reference request with `changes` (PlanRequest's own field names)."""
    return PlanRequest(**{**REFERENCE, **changes})
