"""Layout planner: pure functions from a job's shape and hardware to a (data, context, tensor)
layout, its memory per GPU, FLOPs, step-time estimate and offload chunk. No Kubernetes, no JAX.
"""

from .catalogue import FABRICS, GIB, GPUS, FabricSpec, GpuSpec
from .costs import FlopsPerToken, flops_per_token
from .layouts import Layout, Rejection
from .memory import MemoryBreakdown
from .plan import Candidate, Plan, PlanError, PlanRequest, plan
from .report import format_table, to_json
from .timing import StepTime

__all__ = [
    "FABRICS", "GIB", "GPUS", "Candidate", "FabricSpec", "FlopsPerToken", "GpuSpec", "Layout",
    "MemoryBreakdown", "Plan", "PlanError", "PlanRequest", "Rejection", "StepTime",
    "flops_per_token", "format_table", "plan", "to_json",
]
