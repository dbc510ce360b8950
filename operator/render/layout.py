"""The resolved layout a workload is rendered for (from the planner, or a manual spec)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ResolvedLayout:
    data: int
    context: int
    tensor: int
    processes_per_node: int
    offload: bool = False
    chunk_tokens: int | None = None

    @property
    def devices(self) -> int:
        return self.data * self.context * self.tensor
