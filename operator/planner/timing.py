"""Step-time estimate of one layout: compute plus the communication it cannot hide.

A deliberately simple roofline-style model (see docs/planner.md): compute at the GPU's sustained
matmul rate; ring K/V passes overlap the block computation and only their excess is exposed; TP
all-reduces are exposed; ZeRO-3 gathers and gradient reduce-scatters are prefetched behind
compute; all-gather attention's collectives and Ulysses' all-to-alls are exposed; offload copies of
saved activations run behind compute. An adaptive context-parallel step (`StepInputs.variant`)
rings only its ring part and runs the layers over its padded slots; adaptive.py averages it over
the variants a corpus's batches take.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from longctx_trainer.contract.adaptive import Variant
from longctx_trainer.contract.config import Attention, LoadBalance, Precision, ulysses_degree, ulysses_kv_repeat
from longctx_trainer.contract.flops import flops_per_token
from longctx_trainer.contract.hardware import Fabric, Gpu
from longctx_trainer.contract.model import ModelConfig
from longctx_trainer.contract.topology import consecutive_ring_hops

from .chunking import chunk_compute_seconds, chunk_transfer_seconds
from .costs import FP32, dtype_bytes, kv_dim
from .layouts import Layout


@dataclass(frozen=True)
class StepTime:
    compute: float
    ring_exposed: float
    tensor_parallel: float
    zero_exposed: float
    all_gather: float
    ulysses: float
    offload_exposed: float

    @property
    def total(self) -> float:
        return (
            self.compute
            + self.ring_exposed
            + self.tensor_parallel
            + self.zero_exposed
            + self.all_gather
            + self.ulysses
            + self.offload_exposed
        )


@dataclass(frozen=True)
class Rack:
    """`spec.network.rack`: racks of `nodes` nodes whose uplinks carry 1/`oversubscription` of
    their nodes' fabric bandwidth."""

    nodes: int
    oversubscription: float = 1.0


@dataclass(frozen=True)
class StepInputs:
    model: ModelConfig
    gpu: Gpu
    fabric: Fabric
    layout: Layout
    gpus_per_node: int
    sequence_length: int
    global_batch_tokens: int
    precision: Precision
    recompute: bool
    attention: Attention
    load_balance: LoadBalance
    chunk_tokens: int | None  # None: no offload
    host_saved_bytes: int  # saved activations copied to the host and back each step
    ulysses: int = 1  # the Ulysses group size of attention hybrid
    save_attention: bool = False  # remat policy save_attention: attention's forward runs once
    variant: Variant | None = None  # adaptive context parallelism: this step's ring and local slots per device
    rack: Rack | None = None  # None: no rack level, every node pair at the fabric's bandwidth

    @property
    def ring_tokens(self) -> int:
        """Tokens per device and sequence that go around the ring: the shard, or the variant's ring part."""
        return self.shard_tokens if self.variant is None else self.variant.ring

    @property
    def device_tokens(self) -> int:
        """Positions per device and sequence the layers run over: the shard, or the variant's ring
        and local slots (its padding included)."""
        return self.shard_tokens if self.variant is None else self.variant.ring + self.variant.local

    @property
    def ulysses_degree(self) -> int:
        """Devices each all-to-all spans: the whole context axis (ulysses), a group (hybrid), or 1."""
        return ulysses_degree(self.attention, self.layout.context, self.ulysses)

    @property
    def ring_members(self) -> int:
        """Members of the ring the K/V pass around: devices (ring), Ulysses groups (hybrid), or 1."""
        return {"ring": self.layout.context, "hybrid": self.layout.context // self.ulysses}.get(self.attention, 1)

    @property
    def kv_repeat(self) -> int:
        """Copies of each K/V head the all-to-all needs (GQA heads fewer than the group)."""
        m, t = self.model, self.layout.tensor
        return ulysses_kv_repeat(m.heads // t, m.kv_heads // t, self.ulysses_degree)

    @property
    def local_sequences(self) -> int:
        return self.global_batch_tokens // self.sequence_length // self.layout.data

    @property
    def shard_tokens(self) -> int:
        return self.sequence_length // self.layout.context

    @property
    def forward_passes(self) -> int:
        return 2 if self.recompute else 1

    @property
    def attention_forward_passes(self) -> int:
        """Attention's forward (and its communication) runs again in the backward only under
        recompute without remat policy save_attention."""
        return 1 if self.save_attention else self.forward_passes

    @property
    def imbalance(self) -> float:
        """Ulysses attends the whole sequence on every device (for some heads): always balanced;
        hybrid is a ring of groups, each holding its devices' pieces of the layout."""
        if self.attention == "ulysses":
            return 1.0
        members = self.ring_members if self.attention == "hybrid" else self.layout.context
        return imbalance(self.load_balance, members)


def imbalance(load_balance: LoadBalance, context: int) -> float:
    """Causal attention time of the busiest device over the average one. Unbalanced contiguous
    shards give the last device `context` blocks of work against an average of (context+1)/2."""
    return 1.0 if load_balance != "none" else 2 * context / (context + 1)


def _crosses(devices: int, span: int, domain: int) -> bool:
    """Whether any of the groups of `span` consecutive devices, laid one after another from device
    0 over `devices`, holds devices of two domains of `domain` consecutive devices."""
    return any(g * span // domain != ((g + 1) * span - 1) // domain for g in range(devices // span))


def all_to_all_bandwidth(inp: StepInputs, group_span: int) -> float:
    """Per device, for an all-to-all within every group of `group_span` consecutive devices (every
    device sends to every other at once): NVLink when no group leaves a node, else the fabric, and
    the fabric over the oversubscription when a group spans racks (the rack's GPUs all send
    through its uplinks)."""
    devices, fabric = inp.layout.devices, inp.fabric.achievable_bandwidth
    if inp.rack is not None and _crosses(devices, group_span, inp.gpus_per_node * inp.rack.nodes):
        return fabric / inp.rack.oversubscription
    return fabric if _crosses(devices, group_span, inp.gpus_per_node) else inp.gpu.achievable_nvlink


def rack_uplink_flows(members: int, span: int, rings: int, rack_devices: int) -> int:
    """The most flows leaving any one rack at once, over `rings` consecutive rings of `members`
    members `span` devices apart (ring r's member m holds devices (r * members + m) * span onwards):
    each device sends to the same device of the next member (a tensor rank's or a Ulysses group's
    own ring), the last member's back to the first's; a send counts where its ends are in different
    racks of `rack_devices`. Only the devices that can cross are visited: with members closer than
    a rack, the last `span` of each rack and the last member's."""
    if members < 2:
        return 0
    leaving: Counter[int] = Counter()
    for r in range(rings):
        first = r * members * span
        last = first + (members - 1) * span  # the last member's first device
        if span >= rack_devices:
            forward: Iterable[int] = range(first, last)
        else:
            forward = (
                d
                for k in range(first // rack_devices, (last - 1) // rack_devices + 1)
                for d in range(max(first, (k + 1) * rack_devices - span), min(last, (k + 1) * rack_devices))
            )
        for d in forward:
            if d // rack_devices != (d + span) // rack_devices:
                leaving[d // rack_devices] += 1
        for d in range(last, last + span):  # the wrap to the first member
            if d // rack_devices != (d - last + first) // rack_devices:
                leaving[d // rack_devices] += 1
    return max(leaving.values(), default=0)


def ring_bandwidth(inp: StepInputs, members: int, span: int, rings: int) -> float:
    """Per device, for `rings` consecutive rings of `members` members `span` devices apart (the
    planner's layout, in the trainer's topology order: contract/topology.py). A ring step waits
    for its slowest hop: NVLink when no hop leaves a node, else the fabric; hops between racks
    share the rack's uplinks (its nodes' fabric bandwidth over the oversubscription), so they run
    slower only when more flows leave a rack than its uplinks carry at the fabric's speed."""
    if not consecutive_ring_hops(members, span, inp.gpus_per_node, rings):
        return inp.gpu.achievable_nvlink
    fabric = inp.fabric.achievable_bandwidth
    if inp.rack is None:
        return fabric
    rack_devices = inp.gpus_per_node * inp.rack.nodes
    if not (flows := rack_uplink_flows(members, span, rings, rack_devices)):
        return fabric
    return min(fabric, rack_devices * fabric / inp.rack.oversubscription / flows)


def context_ring_bandwidth(inp: StepInputs) -> float:
    """The K/V ring's (ring, or hybrid's ring of Ulysses groups), over every data group."""
    span = inp.layout.tensor * (inp.ulysses if inp.attention == "hybrid" else 1)
    return ring_bandwidth(inp, inp.ring_members, span, inp.layout.data)


def compute_seconds(inp: StepInputs) -> float:
    """Hardware FLOPs at the sustained rate. Recompute runs every layer's forward again: 2 more
    FLOPs per layer weight and a third more causal attention (forward is 1/3 of forward+backward),
    unless remat policy save_attention keeps attention's output.
    With fp8 the layer matmuls run at the FP8 rate; the LM head and attention stay bf16.
    An adaptive variant runs the layers and the head over its padding slots too; its attention
    is the same per-document work reordered, counted as for the fixed layout."""
    f = flops_per_token(inp.model, inp.sequence_length)
    layers = inp.model.non_embedding_param_count() * (8 if inp.recompute else 6)
    head = f.dense - 6 * inp.model.non_embedding_param_count()
    attention = f.attention_causal * (inp.attention_forward_passes + 2) / 3
    attention *= inp.imbalance
    layer_rate = inp.gpu.achievable_fp8_flops if inp.precision == "fp8" else inp.gpu.achievable_flops
    tokens = inp.global_batch_tokens / inp.layout.devices
    pad = inp.device_tokens / inp.shard_tokens  # 1 but for an adaptive variant's padding slots
    return tokens * (pad * layers / layer_rate + (pad * head + attention) / inp.gpu.achievable_flops)


def attention_forward_seconds_per_layer(inp: StepInputs) -> float:
    """Causal attention forward of one layer on the busiest device, all its local sequences."""
    m, lay = inp.model, inp.layout
    flops = 2 * (m.hidden // lay.tensor) * inp.sequence_length * inp.shard_tokens
    flops *= inp.imbalance * inp.local_sequences
    return flops / inp.gpu.achievable_flops


def ring_exposed_seconds(inp: StepInputs) -> float:
    """Each of members-1 ring steps sends a K/V block while computing on the current one.

    Forward (and the recomputed forward) moves K and V; backward moves K, V and the fp32 dK/dV
    accumulators and computes twice the forward FLOPs. In hybrid a device's block is its group's
    tokens for 1/U of the K/V heads (times the GQA repeat): the bytes of one shard's K/V x repeat.
    An adaptive variant's ring holds `ring_tokens` per device: its blocks send that many tokens'
    K/V and hide them behind a ring_tokens x ring_tokens block (the local part's attention is not
    counted as hiding them: it runs after the ring, ops/adaptive.py).
    """
    if inp.attention == "token_ring":
        return token_ring_exposed_seconds(inp)
    lay, members = inp.layout, inp.ring_members
    if members == 1 or inp.ring_tokens == 0:
        return 0.0
    bandwidth = context_ring_bandwidth(inp)
    kv_block = 2 * kv_dim(inp.model) * inp.kv_repeat // lay.tensor * inp.ring_tokens * inp.local_sequences
    forward_comm = kv_block * dtype_bytes(inp.precision) / bandwidth
    backward_comm = kv_block * (dtype_bytes(inp.precision) + FP32) / bandwidth
    forward_block = attention_forward_seconds_per_layer(inp) / members * (inp.ring_tokens / inp.shard_tokens) ** 2
    forward_exposed = inp.attention_forward_passes * max(0.0, forward_comm - forward_block)
    exposed = forward_exposed + max(0.0, backward_comm - 2 * forward_block)
    return inp.model.layers * (members - 1) * exposed


def token_ring_exposed_seconds(inp: StepInputs) -> float:
    """TokenRing (trainer/ops/token_ring.py): in each of context-1 steps the queries go one way
    and the partial results come back the other, at the same time; links are full duplex, so a
    step takes the busier direction. Forward: queries (input dtype) against the partial output and
    its log-sum-exp (fp32). Backward: q and dO (input dtype) with the fp32 lse and
    delta against the fp32 dQ. The ring's one direction carries K and V (and dK/dV), so TokenRing
    wins when the query width is small against the K/V width (few query heads per K/V head)."""
    lay, m = inp.layout, inp.model
    if lay.context == 1:
        return 0.0
    bandwidth = ring_bandwidth(inp, lay.context, lay.tensor, lay.data)
    tokens = inp.shard_tokens * inp.local_sequences
    q_width, heads, dtype = m.heads * m.head_dim // lay.tensor, m.heads // lay.tensor, dtype_bytes(inp.precision)
    forward_comm = max(q_width * dtype, (q_width + heads) * FP32) * tokens / bandwidth
    backward_comm = max(2 * q_width * dtype + 2 * heads * FP32, q_width * FP32) * tokens / bandwidth
    forward_block = attention_forward_seconds_per_layer(inp) / lay.context
    exposed = inp.forward_passes * max(0.0, forward_comm - forward_block) + max(0.0, backward_comm - 2 * forward_block)
    return m.layers * (lay.context - 1) * exposed


def tensor_parallel_seconds(inp: StepInputs) -> float:
    """Two ring all-reduces of the activations per layer per forward pass and two in backward."""
    t = inp.layout.tensor
    if t == 1:
        return 0.0
    size = inp.local_sequences * inp.device_tokens * inp.model.hidden * dtype_bytes(inp.precision)
    one = 2 * (t - 1) / t * size / inp.gpu.achievable_nvlink
    return inp.model.layers * 2 * (inp.forward_passes + 1) * one


def zero_seconds(inp: StepInputs) -> float:
    """Gather weights for forward and backward, reduce-scatter gradients: 3 passes over this
    tensor rank's weights within the data*context group."""
    lay = inp.layout
    group = lay.data * lay.context
    if group == 1:
        return 0.0
    weights = inp.model.param_count() * dtype_bytes(inp.precision) / lay.tensor
    moved = 3 * weights * (group - 1) / group
    return moved / ring_bandwidth(inp, group, lay.tensor, 1)


def all_gather_seconds(inp: StepInputs) -> float:
    """All-gather of K/V per layer and forward pass, reduce-scatter of dK/dV in backward."""
    lay = inp.layout
    if inp.attention != "all_gather" or lay.context == 1:
        return 0.0
    bandwidth = ring_bandwidth(inp, lay.context, lay.tensor, lay.data)
    received = (
        2
        * kv_dim(inp.model)
        // lay.tensor
        * inp.shard_tokens
        * (lay.context - 1)
        * inp.local_sequences
        * dtype_bytes(inp.precision)
    )
    return inp.model.layers * (inp.attention_forward_passes + 1) * received / bandwidth


def ulysses_seconds(inp: StepInputs) -> float:
    """Per layer and forward pass, all-to-alls of q, k, v (K/V heads repeated where fewer than
    the group) and of the output over the Ulysses group (the context axis, or a hybrid's group of
    U); backward moves their gradients the same way. Each device keeps 1/U of its shard and sends
    the rest; nothing overlaps them (the attention waits for its inputs)."""
    lay, m, degree = inp.layout, inp.model, inp.ulysses_degree
    if degree == 1:
        return 0.0
    width = (2 * m.hidden + 2 * kv_dim(m) * inp.kv_repeat) // lay.tensor
    shard = width * inp.shard_tokens * inp.local_sequences * dtype_bytes(inp.precision)
    sent = shard * (degree - 1) / degree
    return m.layers * (inp.attention_forward_passes + 1) * sent / all_to_all_bandwidth(inp, degree * lay.tensor)


def offload_exposed_seconds(inp: StepInputs, compute: float) -> float:
    """Saved activations go out in forward and come back in backward behind compute; K/V chunk
    fetches (about context * n^2 / 2 per layer and pass for n chunks) hide behind their blocks
    unless the chunk is below the covering size."""
    if inp.chunk_tokens is None:
        return 0.0
    lay, chunk = inp.layout, inp.chunk_tokens
    saved = max(0.0, 2 * inp.host_saved_bytes / inp.gpu.achievable_host_link - compute)
    chunks = inp.shard_tokens // chunk
    fetches = max(1, lay.context * chunks * chunks // 2) * inp.local_sequences
    per_fetch = max(
        0.0,
        chunk_transfer_seconds(inp.model, inp.gpu, lay.tensor, inp.precision, chunk)
        - chunk_compute_seconds(inp.model, inp.gpu, lay.tensor, chunk),
    )
    return saved + inp.model.layers * inp.attention_forward_passes * fetches * per_fetch


def step_time(inp: StepInputs) -> StepTime:
    compute = compute_seconds(inp)
    zero = max(0.0, zero_seconds(inp) - compute)
    return StepTime(
        compute=compute,
        ring_exposed=ring_exposed_seconds(inp),
        tensor_parallel=tensor_parallel_seconds(inp),
        zero_exposed=zero,
        all_gather=all_gather_seconds(inp),
        ulysses=ulysses_seconds(inp),
        offload_exposed=offload_exposed_seconds(inp, compute),
    )
