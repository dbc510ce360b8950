"""Layout planner: pure functions from a job's shape and hardware to a (data, context, tensor)
layout, its memory per GPU, FLOPs, step-time estimate and offload chunk. No Kubernetes, no JAX.
"""

from longctx_trainer.contract.flops import FlopsPerToken, flops_per_token
from longctx_trainer.contract.hardware import FABRICS, GIB, GPUS

from .layouts import Layout, Rejection
from .memory import MemoryBreakdown
from .plan import Candidate, Plan, PlanError, PlanRequest, plan
from .report import against_bf16_json, format_against_bf16, format_table, to_json
from .timing import Rack, StepTime

__all__ = [
    "FABRICS",
    "GIB",
    "GPUS",
    "Candidate",
    "FlopsPerToken",
    "Layout",
    "MemoryBreakdown",
    "Plan",
    "PlanError",
    "PlanRequest",
    "Rack",
    "Rejection",
    "against_bf16_json",
    "format_against_bf16",
    "StepTime",
    "flops_per_token",
    "format_table",
    "plan",
    "to_json",
]
