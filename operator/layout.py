"""The resolved layout: what `resolve` decides (the planner's choice, or a CPU job's manual spec) and
what the renderer and the lifecycle take, so rendering does not depend on planning."""

from __future__ import annotations

from dataclasses import dataclass

from longctx_trainer.contract.config import DEFAULT_REMAT_POLICY, Attention, LoadBalance, RematPolicy


@dataclass(frozen=True)
class ResolvedLayout:
    data: int
    context: int
    tensor: int
    processes_per_node: int
    offload: bool = False
    chunk_tokens: int | None = None
    attention: Attention = "ring"  # the trainer's spelling; the planner's choice under `attention: auto`
    ulysses: int = 1  # the Ulysses group size of attention hybrid
    step_seconds: float | None = None  # the planner's estimate of one step (None: not planned)
    remat_policy: RematPolicy = DEFAULT_REMAT_POLICY  # the planner's choice; CPU jobs (no planner): full
    load_balance: LoadBalance = "dual_chunk_swap"  # the trainer's spelling; what loadBalance auto resolved to

    @property
    def devices(self) -> int:
        return self.data * self.context * self.tensor
