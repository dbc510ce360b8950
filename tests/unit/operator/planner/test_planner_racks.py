"""Racks in the planner's step time (`spec.network.rack`, operator/planner/timing.py): hops between
racks share the rack's uplinks, all-to-alls that span racks run at the fabric over the
oversubscription, and `longctx plan` says which racks it assumed."""

import itertools
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from longctx_operator.api.spec import API_ATTENTION
from longctx_operator.api.validate import InvalidJob, parse_job
from longctx_operator.cli import main
from longctx_operator.planner import PlanError, Rack, plan
from longctx_operator.planner.layouts import Layout
from longctx_operator.planner.timing import (
    StepInputs,
    all_to_all_bandwidth,
    rack_uplink_flows,
    ring_bandwidth,
    step_time,
)
from longctx_operator.resolve import plan_request as spec_plan_request
from longctx_trainer.contract.hardware import FABRICS, GPUS
from support.jobs import job_manifest
from support.plans import plan_request

DOCS = Path(__file__).resolve().parents[4] / "docs" / "planner.md"
IB = FABRICS["infiniband"].achievable_bandwidth
NVLINK = GPUS["h100-80gb"].achievable_nvlink


def inputs(layout: Layout, rack: Rack | None = None, attention="ring", **changes) -> StepInputs:
    """llama3-8b, one 256K sequence, 8 H100 per node over InfiniBand, full remat."""
    return StepInputs(
        model=plan_request().model, gpu=GPUS["h100-80gb"], fabric=FABRICS["infiniband"], layout=layout,
        gpus_per_node=8, sequence_length=262_144, global_batch_tokens=262_144 * layout.data, precision="bf16",
        recompute=True, attention=attention, load_balance="dual_chunk_swap", chunk_tokens=None, host_saved_bytes=0,
        rack=rack, **changes,
    )  # fmt: skip


def test_flows_that_leave_a_rack_by_hand():
    # A ring of 4 nodes' tensor groups (span 8) over racks of one node: every hop leaves its rack
    # with 8 flows, one per GPU.
    assert rack_uplink_flows(members=4, span=8, rings=1, rack_devices=8) == 8
    # 16 devices in one ring over racks of 8: the hop 7 -> 8 leaves rack 0, the wrap 15 -> 0 rack 1.
    assert rack_uplink_flows(members=16, span=1, rings=1, rack_devices=8) == 1
    # The same ring inside one rack of 16 leaves none.
    assert rack_uplink_flows(members=16, span=1, rings=1, rack_devices=16) == 0
    # Four rings of 4 (data 4) over racks of 8: rings 1 and 3 end where a rack ends, none straddles.
    assert rack_uplink_flows(members=4, span=2, rings=4, rack_devices=8) == 0
    # Rings of 3 over racks of 8: ring 2 (devices 6, 7, 8) leaves rack 1 by its wrap 8 -> 6, and
    # ring 5 (15, 16, 17) by its hop 15 -> 16: two flows leave rack 1.
    assert rack_uplink_flows(members=3, span=1, rings=8, rack_devices=8) == 2


def _flows_device_by_device(members: int, span: int, rings: int, rack_devices: int) -> int:
    """rack_uplink_flows' definition, every device visited: the reference for its shortcuts."""
    leaving: Counter[int] = Counter()
    for r in range(rings):
        for m in range(members):
            for offset in range(span):
                here = (r * members + m) * span + offset
                there = (r * members + (m + 1) % members) * span + offset
                if members > 1 and here // rack_devices != there // rack_devices:
                    leaving[here // rack_devices] += 1
    return max(leaving.values(), default=0)


def test_the_flows_are_the_device_by_device_count():
    """Every small case, members closer than a rack and farther; a mutant of the shortcut (the
    last span devices of each rack, the wrap) fails one of them."""
    for members, span, rings, rack in itertools.product(range(1, 7), range(1, 11), range(1, 5), (4, 8, 12, 16)):
        want = _flows_device_by_device(members, span, rings, rack)
        assert rack_uplink_flows(members, span, rings, rack) == want, (members, span, rings, rack)


def test_a_ring_across_racks_slows_only_when_its_flows_exceed_the_uplinks():
    """data 1 x context 4 x tensor 8 on 4 nodes: 8 flows leave each rack of one node. The uplinks
    of 8 GPUs at 4:1 carry 2 GPUs' fabric bandwidth, a quarter of what the 8 flows need; at 1:1
    they carry all 8, and racks of 2 nodes at 2:1 carry 8 too."""
    layout = Layout(1, 4, 8)
    assert ring_bandwidth(inputs(layout), 4, 8, 1) == IB
    assert ring_bandwidth(inputs(layout, Rack(1, 4.0)), 4, 8, 1) == pytest.approx(IB / 4)
    assert ring_bandwidth(inputs(layout, Rack(1, 1.0)), 4, 8, 1) == IB
    assert ring_bandwidth(inputs(layout, Rack(2, 2.0)), 4, 8, 1) == IB
    # A ring inside a node never reaches the fabric, racks or not.
    assert ring_bandwidth(inputs(Layout(4, 8, 1), Rack(1, 4.0)), 8, 1, 4) == NVLINK


def test_an_all_to_all_across_racks_runs_at_the_fabric_over_the_oversubscription():
    layout = Layout(1, 32, 1)
    assert all_to_all_bandwidth(inputs(layout), 8) == NVLINK  # one node
    assert all_to_all_bandwidth(inputs(layout), 16) == IB  # two nodes
    assert all_to_all_bandwidth(inputs(layout, Rack(2, 3.0)), 16) == IB  # two nodes, one rack
    assert all_to_all_bandwidth(inputs(layout, Rack(2, 3.0)), 32) == pytest.approx(IB / 3)  # two racks
    # Groups of 3 on nodes of 8: the third (devices 6-8) straddles two nodes, so the fabric.
    assert all_to_all_bandwidth(inputs(Layout(1, 24, 1)), 3) == IB


def test_ulysses_across_racks_pays_the_oversubscription_in_its_all_to_alls():
    """Ulysses over 32 GPUs (4 nodes) with racks of one node at 4:1: every all-to-all crosses racks,
    so its time is exactly 4 times the rackless one; compute is unchanged."""
    layout = Layout(1, 32, 1)
    flat = step_time(inputs(layout, attention="ulysses"))
    racked = step_time(inputs(layout, Rack(1, 4.0), attention="ulysses"))
    assert racked.ulysses == pytest.approx(4 * flat.ulysses, rel=1e-12) and flat.ulysses > 0
    assert racked.compute == flat.compute


def test_a_gang_inside_one_rack_costs_what_it_costs_without_racks():
    for attention, ulysses in (("ring", 1), ("hybrid", 4), ("ulysses", 1), ("all_gather", 1), ("token_ring", 1)):
        base = inputs(Layout(1, 32, 1), attention=attention, ulysses=ulysses)
        assert step_time(replace(base, rack=Rack(4, 8.0))) == step_time(base), attention


def test_the_plan_reports_its_racks_and_refuses_impossible_ones(capsys):
    request = plan_request(sequence_length=131_072, global_batch_tokens=131_072, nodes=16, attention="auto")
    flat, racked = plan(request), plan(replace(request, rack=Rack(2, 4.0)))
    assert racked.step_seconds > flat.step_seconds
    with pytest.raises(PlanError, match="spec.network.rack.oversubscription"):
        plan(replace(request, rack=Rack(2, 0.5)))
    args = ["plan", "--model", "llama3-8b", "--sequence-length", "131072", "--nodes", "16", "--fabric", "infiniband"]
    assert main([*args, "--rack-nodes", "2", "--rack-oversubscription", "4"]) == 0
    assert "InfiniBand NDR, 400 Gb/s per GPU; racks of 2 nodes, uplinks 4:1" in capsys.readouterr().out
    assert main(args) == 0
    assert "racks of" not in capsys.readouterr().out


def test_the_spec_carries_the_rack_to_the_planner_and_names_a_bad_one():
    job = job_manifest(network={"fabric": "infiniband", "rack": {"nodes": 4, "oversubscription": 3}})
    assert spec_plan_request(parse_job(job).spec).rack == Rack(4, 3.0)
    assert spec_plan_request(parse_job(job_manifest()).spec).rack is None
    for rack in ({"nodes": 0}, {"oversubscription": 2}):  # too few nodes; none given
        with pytest.raises(InvalidJob, match="spec.network.rack.nodes"):
            parse_job(job_manifest(network={"rack": rack}))
    with pytest.raises(InvalidJob, match="spec.network.rack.oversubscription"):
        parse_job(job_manifest(network={"rack": {"nodes": 2, "oversubscription": 0.5}}))


DOC_ROWS = [(32_768, 8, "infiniband"), (131_072, 16, "infiniband"), (131_072, 16, "roce"), (262_144, 16, "roce")]
DOC_RACKS = (None, Rack(4, 2.0), Rack(2, 4.0))
"""docs/planner.md's racks table: llama3-8b, one sequence per step, 8 H100 per node, `auto`."""


def docs_row(seq: int, nodes: int, fabric: str) -> str:
    def cell(rack: Rack | None) -> str:
        p = plan(plan_request(sequence_length=seq, global_batch_tokens=seq, nodes=nodes, fabric=fabric,
                              attention="auto", rack=rack))  # fmt: skip
        c, lay = p.chosen, p.chosen.layout
        kind = f"hybrid U={c.ulysses}" if c.attention == "hybrid" else API_ATTENTION[c.attention]
        return f"{kind} {lay.data}x{lay.context}x{lay.tensor}, {p.step_seconds:.3f}"

    return f"| {seq // 1024}K | {nodes} | {fabric} | " + " | ".join(cell(r) for r in DOC_RACKS) + " |"


def test_the_docs_table_is_the_models():
    section = DOCS.read_text().split("\n### Racks\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == [docs_row(*row) for row in DOC_ROWS]
