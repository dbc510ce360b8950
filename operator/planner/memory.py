"""Bytes per GPU of one layout, broken down by what holds them."""

from __future__ import annotations

from dataclasses import dataclass

from longctx_trainer.contract.adaptive import padded_shard
from longctx_trainer.contract.config import Attention, Precision, loss_chunk, ulysses_degree, ulysses_kv_repeat
from longctx_trainer.contract.model import ModelConfig

from .costs import (
    activation_bytes,
    attention_working_set_bytes,
    embedding_lookup_bytes,
    fp8_scaling_bytes,
    gathered_params_bytes,
    kv_bytes,
    state_bytes_per_device,
)
from .layouts import Layout


@dataclass(frozen=True)
class MemoryBreakdown:
    params: int  # compute copy (bf16), ZeRO-3 shard
    master_weights: int  # fp32 master copy, shard
    optimizer_moments: int  # Adam m and v, shard
    gradients: int  # shard
    gathered_params: int  # ZeRO-3 just-in-time full layers and LM head (and their FP8 copies)
    activations: int  # saved for backward, one layer's recompute working set, loss chunk logits
    attention_working_set: int  # K/V blocks in flight and accumulators of one chunk
    embedding_lookup: int  # whole table gathered for the lookup; never alive with the two above
    host_offloaded: int  # in host memory, not part of total
    capacity: int  # HBM of the GPU
    usable: int  # capacity * memory margin
    fp8_scaling: int = 0  # FP8 delayed-scaling state, replicated (precision fp8)
    factor: float = 1.0  # the GPU's calibrated memory_factor (hardware catalogue)

    @property
    def layers_phase(self) -> int:
        """Transient bytes from the loss to the end of the layers' backward (saved inputs alive)."""
        return self.activations + self.attention_working_set

    @property
    def peak_phase(self) -> str:
        return "embedding lookup" if self.embedding_lookup > self.layers_phase else "layers"

    @property
    def total(self) -> int:
        """Model state and gathered weights, plus the larger of the two transient phases: the
        lookup runs before the first layer's forward and after the first layer's backward, when
        no layer activation is saved; times the GPU's calibrated memory factor."""
        counted = (
            self.params
            + self.master_weights
            + self.optimizer_moments
            + self.gradients
            + self.gathered_params
            + self.fp8_scaling
            + max(self.layers_phase, self.embedding_lookup)
        )
        return counted if self.factor == 1.0 else round(self.factor * counted)

    @property
    def fits(self) -> bool:
        return self.total <= self.usable


@dataclass(frozen=True)
class MemoryInputs:
    model: ModelConfig
    precision: Precision
    layout: Layout
    sequence_length: int
    batch_sequences: int
    recompute: bool
    attention: Attention
    chunk_tokens: int | None  # None: no offload
    capacity: int
    margin: float
    factor: float = 1.0  # the GPU's calibrated memory_factor
    ulysses: int = 1  # the Ulysses group size of attention hybrid
    save_attention: bool = False  # remat policy save_attention (costs.saved_attention_bytes_per_token)
    adaptive: bool = False  # parallelism.adaptive: the layers run over a variant's padded slots


def memory_breakdown(inp: MemoryInputs) -> MemoryBreakdown:
    """With `adaptive`, the larger of the trainer's two kinds of compiled step: the fixed variant
    (the shard in the ring) and the padded ones (a sixteenth more slots, the loss in the chunks that
    divide them, the short documents' attention on the device)."""
    shard = inp.sequence_length // inp.layout.context
    if not inp.adaptive:
        return _breakdown(inp, shard)
    return max(_breakdown(inp, shard), _breakdown(inp, padded_shard(shard)), key=lambda b: b.total)


def _breakdown(inp: MemoryInputs, slots: int) -> MemoryBreakdown:
    """Bytes per GPU of a step whose devices hold `slots` tokens of each local sequence."""
    m, lay, p = inp.model, inp.layout, inp.precision
    local_sequences = inp.batch_sequences // lay.data
    shard = inp.sequence_length // lay.context
    offload = inp.chunk_tokens is not None
    state = state_bytes_per_device(m, p, lay.devices)
    act = activation_bytes(
        m,
        p,
        tensor=lay.tensor,
        resident_tokens=local_sequences * slots,
        loss_tokens=local_sequences * loss_chunk(slots),
        recompute=inp.recompute,
        offload=offload,
        save_attention=inp.save_attention,
    )
    ulysses = inp.attention == "ulysses" and lay.context > 1
    # Ulysses (over the context axis, or a hybrid's groups) repeats K/V heads fewer than its devices
    degree = ulysses_degree(inp.attention, lay.context, inp.ulysses)
    kv_copies = ulysses_kv_repeat(m.heads // lay.tensor, m.kv_heads // lay.tensor, degree)
    if offload:  # one chunk of queries against double-buffered K/V chunks; the rest on the host
        query = kv_tokens = inp.chunk_tokens
        buffers = 2
        waiting_tokens = inp.sequence_length if inp.attention == "all_gather" else shard * kv_copies
        host_kv = kv_bytes(m, p, tensor=lay.tensor, tokens=waiting_tokens) * local_sequences
    elif inp.attention == "all_gather" and lay.context > 1:
        query, kv_tokens, buffers, host_kv = shard, inp.sequence_length, 1, 0
    elif ulysses:  # the whole sequence for 1/context of the heads: a shard's worth of tokens
        query, kv_tokens, buffers, host_kv = shard, shard * kv_copies, 2, 0  # 2: the all-to-all's buffer
    else:  # ring (hybrid: of its groups): the block in use and the one arriving
        query, kv_tokens, host_kv = shard, shard * kv_copies, 0
        buffers = 2 if lay.context > 1 else 1
    attention = local_sequences * attention_working_set_bytes(
        m, p, tensor=lay.tensor, query_tokens=query, kv_tokens=kv_tokens, kv_buffers=buffers
    )
    if slots > shard:  # a padded variant's local part: its short documents on the device, after the ring
        local = attention_working_set_bytes(m, p, tensor=lay.tensor, query_tokens=slots, kv_tokens=slots, kv_buffers=1)
        attention = max(attention, local_sequences * local)
    return MemoryBreakdown(
        params=state.params,
        master_weights=state.master_weights,
        optimizer_moments=state.optimizer_moments,
        gradients=state.gradients,
        gathered_params=gathered_params_bytes(m, p, lay.tensor),
        activations=act.device,
        attention_working_set=attention,
        embedding_lookup=embedding_lookup_bytes(m, p, local_sequences * slots),
        host_offloaded=act.host + host_kv,
        capacity=inp.capacity,
        usable=int(inp.capacity * inp.margin),
        fp8_scaling=fp8_scaling_bytes(m, p),
        factor=inp.factor,
    )
