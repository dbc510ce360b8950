"""The resolved layout: what `resolve` decides (the planner's choice, or a CPU job's manual spec) and
what the renderer and the lifecycle take, so rendering does not depend on planning.

`ResolvedLayout` is built by keyword, here only: from a plan, from a CPU job's spec, or from the
status that recorded it. This module is the one place where the layout crosses between the
trainer's spelling of its choices (snake_case, `longctx_trainer.contract.config`) and the API's
(camelCase, `LayoutStatus`); the spelling maps themselves are the API's (`api/spec.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from longctx_trainer.contract.config import (
    AUTO,
    DEFAULT_ATTENTION,
    DEFAULT_LOAD_BALANCE,
    DEFAULT_REMAT_POLICY,
    Attention,
    LoadBalance,
    RematPolicy,
)

from .api.spec import (
    API_ATTENTION,
    API_LOAD_BALANCE,
    API_REMAT_POLICY,
    TRAINER_ATTENTION,
    TRAINER_LOAD_BALANCE,
    TRAINER_REMAT_POLICY,
    LongContextJobSpec,
)
from .api.status import LayoutStatus

if TYPE_CHECKING:
    from .planner import Plan

UNPLANNED_EXPLANATION = "manual layout taken as written (gpuType cpu: the planner models GPUs only)"


@dataclass(frozen=True, kw_only=True)
class ResolvedLayout:
    data: int
    context: int
    tensor: int
    processes_per_node: int
    offload: bool = False
    chunk_tokens: int | None = None
    attention: Attention = DEFAULT_ATTENTION  # the planner's choice under `attention: auto`
    ulysses: int = 1  # the Ulysses group size of attention hybrid
    step_seconds: float | None = None  # the planner's estimate of one step (None: not planned)
    remat_policy: RematPolicy = DEFAULT_REMAT_POLICY  # the planner's choice; CPU jobs (no planner): full
    load_balance: LoadBalance = DEFAULT_LOAD_BALANCE  # what loadBalance auto resolved to

    @property
    def devices(self) -> int:
        return self.data * self.context * self.tensor

    @classmethod
    def planned(cls, spec: LongContextJobSpec, plan: Plan) -> ResolvedLayout:
        """The layout the planner chose (or validated) for `spec`."""
        chosen = plan.chosen
        return cls(
            data=chosen.layout.data,
            context=chosen.layout.context,
            tensor=chosen.layout.tensor,
            processes_per_node=spec.processes_per_node(),
            offload=chosen.offload,
            chunk_tokens=chosen.chunk_tokens,
            attention=chosen.attention,
            ulysses=chosen.ulysses,
            step_seconds=spec.batch_tokens / chosen.tokens_per_second,
            remat_policy=chosen.remat_policy,
            load_balance=plan.request.load_balance,
        )

    @classmethod
    def manual(cls, spec: LongContextJobSpec) -> ResolvedLayout:
        """A CPU job's layout as written (a rule makes it manual: the planner models GPUs only)."""
        p = spec.parallelism
        return cls(
            data=p.data,
            context=p.context,
            tensor=p.tensor,
            processes_per_node=spec.processes_per_node(),
            offload=bool(spec.offload.enabled),
            chunk_tokens=spec.offload.chunk_tokens,
            attention=unplanned_attention(spec),
            ulysses=p.ulysses or 1,
            load_balance=spec.trainer_load_balance(),
        )

    def to_status(self, spec: LongContextJobSpec, plan: Plan | None) -> LayoutStatus:
        """The status's record of this layout (with the plan's estimates, when planned)."""
        return LayoutStatus(
            data=self.data,
            context=self.context,
            tensor=self.tensor,
            processes_per_node=self.processes_per_node,
            processes=spec.resources.nodes * self.processes_per_node,
            offload=self.offload,
            chunk_tokens=self.chunk_tokens,
            attention=API_ATTENTION[self.attention],
            ulysses=self.ulysses if self.attention == "hybrid" else None,
            load_balance=API_LOAD_BALANCE[self.load_balance],
            remat_policy=API_REMAT_POLICY[self.remat_policy],
            memory_per_gpu=f"{plan.chosen.memory.total / 2**30:.1f}Gi" if plan else None,
            estimated_tokens_per_second=round(plan.chosen.tokens_per_second, 1) if plan else None,
            explanation=plan.explanation if plan else UNPLANNED_EXPLANATION,
        )

    @classmethod
    def from_status(cls, layout: LayoutStatus, spec: LongContextJobSpec) -> ResolvedLayout:
        """The recorded layout to render again; a status from before a choice was recorded runs the
        spec's (attention, load balance) or the default (remat policy)."""
        return cls(
            data=layout.data,
            context=layout.context,
            tensor=layout.tensor,
            processes_per_node=layout.processes_per_node,
            offload=layout.offload,
            chunk_tokens=layout.chunk_tokens,
            attention=TRAINER_ATTENTION[layout.attention] if layout.attention else unplanned_attention(spec),
            ulysses=layout.ulysses or spec.parallelism.ulysses or 1,
            step_seconds=spec.batch_tokens / layout.estimated_tokens_per_second
            if layout.estimated_tokens_per_second
            else None,
            remat_policy=TRAINER_REMAT_POLICY[layout.remat_policy] if layout.remat_policy else DEFAULT_REMAT_POLICY,
            load_balance=TRAINER_LOAD_BALANCE[layout.load_balance]
            if layout.load_balance
            else spec.trainer_load_balance(),
        )


def unplanned_attention(spec: LongContextJobSpec) -> Attention:
    """The attention kind where no planner chooses it (CPU jobs): auto means the default there."""
    attention = spec.trainer_attention()
    return DEFAULT_ATTENTION if attention == AUTO else attention
