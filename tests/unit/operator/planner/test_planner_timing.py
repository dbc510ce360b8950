"""Step-time pieces against hand calculations: ring exposure, load imbalance, ZeRO, all-gather.

The derivations are exact: rel=1e-9 (on 2026-11-24 each matched with rel=0, i.e. to 1e-12 absolute).
"""

from dataclasses import replace

import pytest

from longctx_operator.planner import PlanError, plan
from longctx_trainer.contract.hardware import GPUS
from longctx_trainer.contract.presets import PRESETS
from support.plans import plan_request

LLAMA8B = PRESETS["llama3-8b"]
F = 989e12 * 0.5  # sustained H100 FLOP/s
TCP = 100e9 / 8 / 8 * 0.6  # bytes/s per GPU: 100 GbE per node, 8 GPUs, 60% sustained


def request(**overrides):
    return plan_request(**{"data": 1, "context": 32, "tensor": 1, "remat_policy": "full", **overrides})


def test_ring_exposure_over_tcp_by_hand():
    step = plan(request(fabric="tcp")).chosen.step
    # Shard 8192 tokens; a K/V block is 2 * 1024 * 8192 = 16,777,216 values.
    forward_comm = 16_777_216 * 2 / TCP  # bf16 K/V: 0.0358 s
    backward_comm = 16_777_216 * 6 / TCP  # K/V plus fp32 dK/dV: 0.1074 s
    # One ring step of causal forward attention: 2 * 4096 * 262,144 * 8192 / 32 FLOPs.
    block = 2 * 4096 * 262_144 * 8192 / 32 / F  # 1.11 ms
    per_step = 2 * (forward_comm - block) + (backward_comm - 2 * block)  # forward twice (recompute)
    assert step.ring_exposed == pytest.approx(32 * 31 * per_step, rel=1e-9)


def test_ring_is_hidden_on_nvlink_and_slower_fabrics_expose_more():
    tcp = plan(request(fabric="tcp")).chosen.step.ring_exposed
    infiniband = plan(request()).chosen.step.ring_exposed
    assert tcp > infiniband >= 0
    # A ring inside one node runs over NVLink whatever the fabric.
    inside = [plan(request(nodes=1, context=8, fabric=f)).chosen.step.ring_exposed for f in ("tcp", "efa")]
    assert inside[0] == inside[1]


def test_no_load_balancing_costs_the_busiest_device():
    balanced = plan(request(data=1, context=8, tensor=4)).chosen.step.compute
    unbalanced = plan(request(data=1, context=8, tensor=4, load_balance="none")).chosen.step.compute
    # Attention (with its recomputed forward, 4/3) times 2c/(c+1) - 1 = 16/9 - 1 = 7/9 extra.
    attention = 206_158_430_208 * 4 / 3 * 262_144 / 32 / F
    assert unbalanced - balanced == pytest.approx(attention * 7 / 9, rel=1e-9)
    striped = plan(request(data=1, context=8, tensor=4, load_balance="striped")).chosen.step.compute
    assert striped == balanced


def test_zero_traffic_is_exposed_only_beyond_compute():
    # Short sequences over TCP: ZeRO-3 moves 3 * 2 B * P * 31/32 per device and dominates.
    short = plan(request(sequence_length=4096, global_batch_tokens=4096 * 32, data=32, context=1, fabric="tcp"))
    zero = 3 * 2 * 8_030_261_248 * 31 / 32 / TCP
    assert short.chosen.step.zero_exposed == pytest.approx(zero - short.chosen.step.compute, rel=1e-9)
    # 256K tokens on InfiniBand: 3 * 2 B * P / 4 * 7/8 / 40 GB/s = 0.26 s hides behind 5.5 s.
    long = plan(request(data=1, context=8, tensor=4)).chosen.step
    assert 3 * 2 * 8_030_261_248 / 4 * 7 / 8 / 40e9 < long.compute
    assert long.zero_exposed == 0.0


def test_all_gather_attention_is_exposed_and_replaces_the_ring():
    ring = plan(request(data=1, context=8, tensor=4))
    gathered = plan(request(data=1, context=8, tensor=4, attention="all_gather"))
    assert gathered.chosen.step.ring_exposed == 0.0
    # Per layer and pass (2 forward, 1 backward): the other 7 shards of K/V on this tensor rank,
    # 7 * 32,768 tokens * 2 * 256 values * 2 B; the 8 x 4 group spans 4 nodes, so over
    # InfiniBand at 400 Gb/s * 0.8 = 40 GB/s per GPU.
    expected = 32 * 3 * 7 * 32_768 * 2 * 256 * 2 / (400e9 / 8 * 0.8)
    assert gathered.chosen.step.all_gather == pytest.approx(expected, rel=1e-9)
    assert gathered.chosen.memory.attention_working_set > ring.chosen.memory.attention_working_set


def test_ulysses_all_to_alls_by_hand_and_balanced_attention():
    ring = plan(request(data=1, context=8, tensor=4, load_balance="none"))
    ulysses = plan(request(data=1, context=8, tensor=4, load_balance="none", attention="ulysses"))
    assert ulysses.chosen.step.ring_exposed == 0.0 and ulysses.chosen.step.all_gather == 0.0
    # Tensor rank: 8 query heads and 2 K/V heads over context 8, so each K/V head is repeated 4
    # times. Per layer and pass (2 forward, 1 backward): q, out (2 * 4096 / 4 values per token)
    # and k, v (2 * 1024 * 4 / 4) over a 32,768-token shard, 7/8 of it sent, bf16, InfiniBand.
    per_pass = (2 * 1024 + 2 * 1024) * 32_768 * 2 * 7 / 8
    assert ulysses.chosen.step.ulysses == pytest.approx(32 * 3 * per_pass / (400e9 / 8 * 0.8), rel=1e-9)
    # Every device attends the whole sequence for some heads: no causal imbalance, whatever the layout.
    attention = 206_158_430_208 * 4 / 3 * 262_144 / 32 / F
    assert ring.chosen.step.compute - ulysses.chosen.step.compute == pytest.approx(attention * 7 / 9, rel=1e-9)


def test_ulysses_rejects_contexts_the_heads_cannot_split_over():
    # llama3-8b: 32 heads, 8 K/V heads; tensor 1 x context 32 works (K/V repeated 4 times), but
    # 64 devices of context over 32 heads cannot.
    assert plan(request(attention="ulysses")).chosen.layout.context == 32
    with pytest.raises(PlanError, match="heads per tensor rank"):
        plan(request(nodes=8, context=64, attention="ulysses"))


@pytest.mark.parametrize("fabric,expected", [("infiniband", "ring"), ("tcp", "all_gather")])
def test_auto_attention_keeps_the_fastest_kind_that_fits(fabric, expected):
    # llama3-8b at 32K on 32 GPUs: on InfiniBand the ring's K/V passes hide behind its blocks; over
    # TCP they do not, and one all-gather of K/V per layer and pass costs less than the exposed ring.
    job = dict(sequence_length=32_768, global_batch_tokens=32_768, data=None, context=None, tensor=None, fabric=fabric)
    auto = plan(request(attention="auto", **job))
    kinds = ("ring", "all_gather", "ulysses", "hybrid", "token_ring")
    each = {kind: plan(request(attention=kind, **job)) for kind in kinds}
    assert auto.chosen.attention == expected == min(each, key=lambda kind: each[kind].step_seconds)
    assert auto.step_seconds == each[expected].step_seconds and auto.chosen.layout == each[expected].chosen.layout
    assert {c.attention for c in auto.candidates} == set(each)  # every kind planned on every layout


def test_token_ring_exposure_over_tcp_by_hand():
    step = plan(request(fabric="tcp", attention="token_ring")).chosen.step
    # Shard 8192 tokens; queries 4096 wide, 32 heads. Forward: bf16 q one way, fp32 out + lse back.
    forward_comm = max(4096 * 2, (4096 + 32) * 4) * 8192 / TCP
    # Backward: bf16 q and dO plus fp32 lse and delta one way, fp32 dQ back.
    backward_comm = max(2 * 4096 * 2 + 2 * 32 * 4, 4096 * 4) * 8192 / TCP
    block = 2 * 4096 * 262_144 * 8192 / 32 / F
    per_step = 2 * (forward_comm - block) + (backward_comm - 2 * block)
    assert step.ring_exposed == pytest.approx(32 * 31 * per_step, rel=1e-9)


def test_auto_picks_token_ring_where_the_query_side_is_lighter_than_the_ring():
    # Multi-head attention (K/V as wide as the queries) at 16K on 2 nodes of 8 over InfiniBand: the
    # ring's dK/dV in fp32 one way cost more than TokenRing's queries one way and dQ the other.
    mha = LLAMA8B.model_copy(update={"kv_heads": LLAMA8B.heads})
    job = dict(model=mha, nodes=2, sequence_length=16_384, global_batch_tokens=16_384)
    auto = plan(request(attention="auto", data=None, context=None, tensor=None, **job))
    assert auto.chosen.attention == "token_ring"
    assert (
        auto.chosen.step.ring_exposed
        < plan(request(attention="ring", **auto_layout(auto), **job)).chosen.step.ring_exposed
    )
    # Grouped-query llama3-8b (4 query heads per K/V head): the ring moves a quarter of the bytes.
    gqa = plan(request(attention="auto", data=None, context=None, tensor=None, **{**job, "model": LLAMA8B}))
    assert gqa.chosen.attention != "token_ring"


def auto_layout(planned):
    return dict(
        data=planned.chosen.layout.data, context=planned.chosen.layout.context, tensor=planned.chosen.layout.tensor
    )


def test_auto_attention_with_a_manual_layout_picks_the_kind_only():
    pinned = request(attention="auto", fabric="tcp", data=1, context=4, tensor=8, sequence_length=32_768)
    planned = plan(pinned)
    assert (
        planned.chosen.layout
        == plan(request(fabric="tcp", data=1, context=4, tensor=8, sequence_length=32_768)).chosen.layout
    )
    assert planned.chosen.attention == "all_gather" and "fastest attention" in planned.explanation
    # One sequence over 32 devices of context (4 nodes): all-to-alls of 1K-token shards beat 31 exposed
    # ring steps, and best inside a node: Ulysses groups of 8 on NVLink, a ring of 4 over TCP.
    wide = plan(replace(pinned, context=32, tensor=1))
    assert (wide.chosen.attention, wide.chosen.ulysses) == ("hybrid", 8)
    ulysses = plan(replace(pinned, context=32, tensor=1, attention="ulysses"))
    assert wide.chosen.step.ulysses < ulysses.chosen.step.ulysses and wide.step_seconds < ulysses.step_seconds


def test_hybrid_all_to_alls_inside_the_group_and_a_ring_of_groups_by_hand():
    # llama3-8b at 256K, context 8 x tensor 4 over 4 nodes, Ulysses groups of 2: 8 heads and 2 K/V
    # heads per tensor rank split over the group (no repeat); 32,768-token shards.
    step = plan(request(data=1, context=8, tensor=4, attention="hybrid", ulysses=2, fabric="tcp")).chosen.step
    # All-to-alls of q, out (2 * 4096 / 4) and k, v (2 * 1024 / 4) values per token, half of the
    # shard sent, inside a group of 2 x 4 = 8 GPUs: one node, NVLink. 3 passes per layer.
    sent = (2 * 1024 + 2 * 256) * 32_768 * 2 / 2
    assert step.ulysses == pytest.approx(32 * 3 * sent / GPUS["h100-80gb"].achievable_nvlink, rel=1e-9)
    # A ring of 4 groups over the 32-GPU context group (TCP between the nodes): each step moves
    # one shard's K/V for this device's K/V head, 2 * 256 * 32,768 values, and computes 1/4 of its
    # causal attention forward, 2 * 1024 * 262,144 * 32,768 FLOPs.
    kv_block, block = 2 * 256 * 32_768, 2 * 1024 * 262_144 * 32_768 / F / 4
    per_step = 2 * (kv_block * 2 / TCP - block) + (kv_block * 6 / TCP - 2 * block)  # 36 ms > 8.9 ms: exposed
    assert step.ring_exposed == pytest.approx(32 * 3 * per_step, rel=1e-9)
    assert step.all_gather == 0.0
