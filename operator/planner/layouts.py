"""Enumerating (data, context, tensor) layouts and the structural checks each must pass."""

from __future__ import annotations

from dataclasses import dataclass

from longctx_trainer.contract.config import Attention, LoadBalance, hybrid_split, sequence_split, ulysses_kv_repeat
from longctx_trainer.contract.model import ModelConfig


@dataclass(frozen=True)
class Layout:
    data: int
    context: int
    tensor: int

    @property
    def devices(self) -> int:
        return self.data * self.context * self.tensor

    def __str__(self) -> str:
        return f"data={self.data} context={self.context} tensor={self.tensor}"


@dataclass(frozen=True)
class Rejection:
    """Why a layout (or request) cannot run: a sentence and the spec field it is about."""

    field: str
    message: str
    auto_field: str | None = None
    """The field to change instead when the planner chose this axis (parallelism mode auto): the
    input that rules the axis out, e.g. the sequence length for a context that does not divide it."""


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def enumerate_layouts(devices: int) -> list[Layout]:
    """Every (data, context, tensor) whose product is the device count."""
    return [
        Layout(data, context, devices // (data * context))
        for data in divisors(devices)
        for context in divisors(devices // data)
    ]


def structural_rejections(
    layout: Layout,
    *,
    model: ModelConfig,
    sequence_length: int,
    batch_sequences: int,
    gpus_per_node: int,
    load_balance: LoadBalance,
    attention: Attention,
    ulysses: int = 1,
) -> list[Rejection]:
    """Reasons independent of memory and speed; empty when the layout can run at all. `ulysses`:
    the Ulysses group size of attention hybrid."""
    out: list[Rejection] = []
    t = layout.tensor
    tensor_field = "spec.parallelism.tensor"
    if t > gpus_per_node:
        out.append(Rejection(tensor_field, f"tensor={t} exceeds {gpus_per_node} GPUs per node"))
    elif gpus_per_node % t:
        out.append(Rejection(tensor_field, f"tensor={t} does not divide {gpus_per_node} GPUs per node"))
    if model.heads % t:
        out.append(Rejection(tensor_field, f"tensor={t} does not divide heads={model.heads}"))
    if model.kv_heads % t:
        out.append(Rejection(tensor_field, f"tensor={t} does not divide kv_heads={model.kv_heads}"))
    elif attention == "ulysses" and not model.heads % t:
        try:
            ulysses_kv_repeat(model.heads // t, model.kv_heads // t, layout.context)
        except ValueError as error:
            out.append(Rejection("spec.parallelism.context", str(error)))
    elif attention == "hybrid" and not model.heads % t:
        try:
            hybrid_split(layout.context, ulysses)
            ulysses_kv_repeat(model.heads // t, model.kv_heads // t, ulysses)
        except ValueError as error:
            out.append(Rejection("spec.parallelism.ulysses", str(error)))
    split = sequence_split(load_balance, layout.context)
    if sequence_length % split:
        what = f"2*context={split}" if load_balance == "dual_chunk_swap" else f"context={split}"
        out.append(
            Rejection(
                "spec.parallelism.context",
                f"sequence {sequence_length} not divisible by {what}",
                auto_field="spec.sequenceLength",
            )
        )
    if batch_sequences % layout.data:
        noun = "sequence" if batch_sequences == 1 else "sequences"
        out.append(
            Rejection(
                "spec.parallelism.data",
                f"batch of {batch_sequences} {noun} not divisible by data={layout.data}",
                auto_field="spec.globalBatchTokens",
            )
        )
    return out
