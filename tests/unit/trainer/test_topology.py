"""Topology-ordered rings (contract/topology.py and trainer/topology.py): the ring order from the
ranks' placements, the hops it makes across each level, and the same loss on a reordered mesh.

Eight simulated processes (one CPU device each: `process_of` maps a device to its process) sit on
eight nodes in two racks; their completion indices alternate between the racks, the worst case of
an index-ordered ring (every hop crosses racks).
"""

import gzip
import itertools
import json
from functools import partial

import jax
import numpy as np
import pytest

from longctx_trainer import model
from longctx_trainer.contract import podenv
from longctx_trainer.contract.config import ParallelConfig
from longctx_trainer.contract.topology import (
    NODE,
    ORDER_INDEX,
    PLACEMENT_MAX_BYTES,
    PLACEMENT_TABLE_MAX_BYTES,
    Placement,
    Topology,
    consecutive_ring_hops,
    decode_placement,
    encode_placement,
    encode_table,
    placement_labels,
    read_placement,
    ring_hops,
    ring_order,
    tabled_nodes,
    tabled_placement,
)
from longctx_trainer.mesh import make_mesh
from longctx_trainer.topology import context_rings, ordered_mesh
from support import mutants
from support.tiny import TINY_MODEL
from support.tiny_model import model_options

RACK = "example.com/rack"
TOPOLOGY = Topology((RACK, NODE), "topology")
# Rank p on node n<p> in rack p % 2: the index order alternates racks.
PLACEMENTS = [Placement((f"rack-{p % 2}", f"n{p}")) for p in range(8)]


def _one_process_per_device(device: jax.Device) -> int:
    return device.id


def test_eight_ranks_in_two_racks_make_two_cross_rack_hops_instead_of_eight():
    mesh, report = ordered_mesh(ParallelConfig(context=8), TOPOLOGY, PLACEMENTS, process_of=_one_process_per_device)
    assert report.order == [0, 2, 4, 6, 1, 3, 5, 7]
    assert report.hops == {RACK: 2, NODE: 8}
    assert report.unordered == {RACK: 8, NODE: 8}
    assert [d.id for d in context_rings(mesh)[0]] == report.order  # the mesh really is in that order
    assert report.event() == {
        "event": "ring_order",
        "order": [0, 2, 4, 6, 1, 3, 5, 7],
        "rank_order": "topology",
        "cross_hops": {RACK: 2, NODE: 8},
        "cross_hops_index_order": {RACK: 8, NODE: 8},
    }


def test_rings_of_four_stay_inside_a_rack():
    """Data 2 x context 4: each context ring is one rack's four ranks (none crosses), where the
    index order's rings cross racks at every hop."""
    _, report = ordered_mesh(
        ParallelConfig(data=2, context=4), TOPOLOGY, PLACEMENTS, process_of=_one_process_per_device
    )
    assert report.hops == {RACK: 0, NODE: 4} and report.unordered == {RACK: 4, NODE: 4}


def test_tensor_groups_stay_on_one_node():
    """Two ranks per node, listed apart: the order puts each node's ranks next to each other, so
    tensor 2's groups (consecutive devices) are one node's ranks."""
    placements = [Placement(("rack-0", f"n{p % 4}")) for p in range(8)]
    mesh, _ = ordered_mesh(
        ParallelConfig(context=4, tensor=2), TOPOLOGY, placements, process_of=_one_process_per_device
    )
    groups = mesh.devices.reshape(-1, 2)
    assert all(placements[a.id].domains == placements[b.id].domains for a, b in groups)


def test_kueue_order_keeps_the_index_order():
    assert ring_order(PLACEMENTS, ORDER_INDEX) == list(range(8))


def test_ties_and_unknown_levels_keep_the_index_order():
    """A level no rank knows (an empty label) orders nothing and counts no hop."""
    placements = [Placement(("", "n1")), Placement(("", "n0")), Placement(("", "n1"))]
    assert ring_order(placements) == [1, 0, 2]
    _, report = ordered_mesh(
        ParallelConfig(context=3),
        TOPOLOGY,
        placements,
        devices=jax.devices()[:3],
        process_of=_one_process_per_device,
    )
    assert report.hops == {NODE: 2}


def test_ring_hops_counts_the_wrap_around_and_outer_levels():
    a, b = Placement(("r0", "n0")), Placement(("r1", "n0"))  # same node name in two racks: two nodes
    assert ring_hops((RACK, NODE), [[a, b]]) == {RACK: 2, NODE: 2}
    assert ring_hops((RACK, NODE), [[a]]) == {RACK: 0, NODE: 0}


def test_consecutive_ring_hops_of_the_planner_layout():
    assert consecutive_ring_hops(members=8, span=1, devices_per_node=8) == 0
    assert consecutive_ring_hops(members=16, span=1, devices_per_node=8) == 2
    assert consecutive_ring_hops(members=4, span=8, devices_per_node=8) == 4
    # Eight rings of 3 on nodes of 8: the third (GPUs 6, 7, 8) crosses twice.
    assert consecutive_ring_hops(members=3, span=1, devices_per_node=8, rings=8) == 2


def test_consecutive_ring_hops_is_ring_hops_over_the_laid_out_placements():
    """The closed form against the trainer's own count over the planner's layout, every small case."""
    for members, span, per_node, rings in itertools.product(range(1, 9), range(1, 10), (1, 2, 4, 8), range(1, 5)):
        laid = [[Placement((str((r * members + m) * span // per_node),)) for m in range(members)] for r in range(rings)]
        want = ring_hops((NODE,), laid)[NODE]
        assert consecutive_ring_hops(members, span, per_node, rings) == want, (members, span, per_node, rings)


def test_placement_from_the_pod_environment():
    env = {
        podenv.TOPOLOGY_LEVELS: f"topology.kubernetes.io/zone,{RACK}",
        podenv.topology_level(0): "zone-a",
        podenv.NODE_NAME: "gpu-7",
    }
    topology, placement = Topology.from_environ(env)
    assert topology == Topology(("topology.kubernetes.io/zone", RACK, NODE), "topology")
    assert placement == Placement(("zone-a", "", "gpu-7"))  # the rack label was not on the pod
    with pytest.raises(ValueError, match=podenv.RANK_ORDER):
        Topology.from_environ({podenv.RANK_ORDER: "random"})


# The same loss on the rack-ordered mesh as on the index-ordered one: data 2 x context 4, so every
# context ring holds other devices. Measured 2026-11-26: the two losses are bitwise equal (the
# devices are relabelled, the computation is the same); the RoPE mutant moves the loss by 2.9e-6
# relative. The loss only (no gradients): each compilation takes 30-40 s on a loaded 2-core machine.
LAYOUT = ParallelConfig(data=2, context=4)


def _loss(mesh) -> float:
    lm = model.Model(TINY_MODEL, mesh, model_options())
    params = jax.jit(partial(model.init_params, TINY_MODEL), out_shardings=lm.param_shardings())(jax.random.key(1))
    tokens = np.random.default_rng(0).integers(0, TINY_MODEL.vocab, (2, 33))
    return float(jax.jit(lm.loss)(params, tokens[:, :-1], tokens[:, 1:]))


@pytest.fixture(scope="module")
def index_ordered() -> float:
    return _loss(make_mesh(LAYOUT))


def _assert_reordered_matches(reference: float) -> None:
    mesh, report = ordered_mesh(LAYOUT, TOPOLOGY, PLACEMENTS, process_of=_one_process_per_device)
    assert report.order != list(range(8))
    np.testing.assert_allclose(_loss(mesh), reference, rtol=1e-7)


def test_a_reordered_mesh_computes_the_same_loss(index_ordered):
    _assert_reordered_matches(index_ordered)


def test_the_comparison_fails_on_a_wrong_rope_offset(index_ordered, monkeypatch):
    mutants.shift_rope_of_last_shard(monkeypatch, context=4)
    with pytest.raises(AssertionError):
        _assert_reordered_matches(index_ordered)


def test_the_placement_annotation_gives_the_levels_the_pod_labels_lack():
    env = {
        podenv.TOPOLOGY_LEVELS: f"topology.kubernetes.io/zone,{RACK}",
        podenv.topology_level(0): "zone-a",
        podenv.NODE_NAME: "gpu-7",
    }
    node_labels = decode_placement(
        encode_placement({RACK: "rack-3", "other": "x"}, ["topology.kubernetes.io/zone", RACK])
    )
    assert node_labels == {RACK: "rack-3"}  # only the levels' keys, and only those the node has
    _, placement = Topology.from_environ(env, node_labels)
    assert placement == Placement(("zone-a", "rack-3", "gpu-7"))


class FakeClock:
    """time.monotonic and time.sleep of read_placement: sleeping moves the clock; `then` runs once
    the clock passes `at` (the kubelet writing the annotation into the file)."""

    def __init__(self, at: float = float("inf"), then=lambda: None):
        self.now, self.at, self.then = 0.0, at, then

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.now >= self.at:
            self.then()
            self.at = float("inf")


def test_read_placement_waits_for_the_annotation_to_appear(tmp_path):
    path = tmp_path / "placement"
    path.write_text("")  # the downward-API file of an annotation not written yet
    clock = FakeClock(at=5, then=lambda: path.write_text(json.dumps({RACK: "rack-1"})))
    assert read_placement(path, timeout=60, clock=clock, sleep=clock.sleep) == ({RACK: "rack-1"}, "")
    assert 5 <= clock.now < 6


def test_read_placement_gives_up_after_its_timeout_and_says_why(tmp_path):
    path = tmp_path / "placement"
    path.write_text("")
    clock = FakeClock()
    labels, why = read_placement(path, timeout=30, clock=clock, sleep=clock.sleep)
    assert labels is None and clock.now == 30
    assert why == f"{path} stayed empty (the operator wrote no placement annotation) for 30s"
    labels, why = read_placement(tmp_path / "absent", timeout=1, clock=clock, sleep=clock.sleep)
    assert labels is None and "No such file or directory for 1s" in why


@pytest.mark.parametrize(
    ("text", "why"),
    [("[1]", "not a JSON object of strings"), ('{"a": 1}', "not a JSON object of strings"), ("{", "not JSON")],
)
def test_read_placement_refuses_what_the_operator_does_not_write_at_once(tmp_path, text, why):
    path = tmp_path / "placement"
    path.write_text(text)
    clock = FakeClock()
    assert read_placement(path, timeout=30, clock=clock, sleep=clock.sleep) == (None, f"{path}: {why}")
    assert clock.now == 0  # no waiting for a file that is there
    path.write_text(json.dumps({RACK: "r" * PLACEMENT_MAX_BYTES}))
    assert read_placement(path, timeout=0)[1] == f"{path}: larger than {PLACEMENT_MAX_BYTES} bytes"


def test_no_placement_file_named_no_wait():
    assert placement_labels({}) == (None, "")
    assert placement_labels({podenv.PLACEMENT_FILE: ""}) == (None, "")


def table_environ(tmp_path, table: bytes, node: str, annotation: str | None = None) -> dict[str, str]:
    """A pod's env naming the placement table (holding `table`) and an annotation file."""
    (tmp_path / "table.json.gz").write_bytes(table)
    environ = {podenv.NODE_NAME: node, podenv.PLACEMENT_TABLE: str(tmp_path / "table.json.gz")}
    environ[podenv.PLACEMENT_FILE] = str(tmp_path / "placement.json")
    (tmp_path / "placement.json").write_text(annotation or "")
    return environ


def test_the_placement_table_holds_each_placement_once_and_gives_each_node_its_own():
    rack = {f"node-{i}": encode_placement({RACK: f"rack-{i // 4}", "other": "x"}, (RACK,)) for i in range(8)}
    table, tabled = encode_table(rack)
    assert tabled == tabled_nodes(table) == frozenset(rack)
    text = gzip.decompress(table).decode()
    assert text.count("rack-0") == text.count("rack-1") == 1
    placed = [tabled_placement(table, f"node-{i}") for i in (0, 3, 4, 7)]
    assert placed == [{RACK: "rack-0"}] * 2 + [{RACK: "rack-1"}] * 2
    assert tabled_placement(table, "node-8") is None


def test_the_placement_table_is_compressed_and_the_same_placements_give_the_same_bytes():
    """As plain JSON, a large cluster's table was the slowest write of a starting gang (docs/operator.md)."""
    many = {f"sim-gpu-{i:04d}": encode_placement({RACK: f"rack-{i // 8:04d}"}, (RACK,)) for i in range(2000)}
    table, _ = encode_table(many)
    assert len(table) * 8 < len(gzip.decompress(table))
    assert encode_table(dict(reversed(many.items())))[0] == table
    assert table[4:8] == bytes(4)  # gzip's MTIME: none, so no clock makes two tables differ


def test_the_placement_table_stays_within_its_size_leaving_the_last_nodes_by_name_out():
    many = {f"gpu-node-{i:06d}": encode_placement({RACK: f"rack-{i // 8}"}, (RACK,)) for i in range(40_000)}
    table, tabled = encode_table(many)
    size = len(gzip.decompress(table))
    assert size <= PLACEMENT_TABLE_MAX_BYTES < size + 64
    assert tabled == frozenset(sorted(many)[: len(tabled)]) and 0 < len(tabled) < len(many)
    assert tabled_placement(table, max(tabled)) == {RACK: f"rack-{int(max(tabled)[-6:]) // 8}"}


def gzipped(text: str) -> bytes:
    return gzip.compress(text.encode())


OVERSIZED_TABLE = gzipped('{"nodes": {"n": 0}, "x": "' + "y" * PLACEMENT_TABLE_MAX_BYTES + '"}')


@pytest.mark.parametrize(
    ("table", "why"),
    [
        (gzipped("[]"), "not a placement table"),
        (gzipped('{"domains": [], "nodes": {"n": 0}}'), "node 'n' has no domain"),
        (gzipped('{"domains": [{"a": 1}], "nodes": {"n": 0}}'), "a domain is not a JSON object of strings"),
        (gzipped("{"), "not JSON"),
        (b'{"domains": [], "nodes": {}}', "not gzip"),
        (gzipped('{"domains": [], "nodes": {}}')[:-9], "truncated"),
        (OVERSIZED_TABLE, f"larger than {PLACEMENT_TABLE_MAX_BYTES} bytes"),
    ],
)
def test_a_table_that_is_not_the_operators_is_refused(table, why):
    with pytest.raises(ValueError, match=why):
        tabled_placement(table, "n")


@pytest.mark.parametrize(
    "table", [b"", gzipped(""), gzipped("[1]"), gzipped("{"), gzipped('{"nodes": [1]}'), OVERSIZED_TABLE]
)
def test_what_is_not_a_table_holds_no_nodes(table):
    assert tabled_nodes(table) == frozenset()


def test_a_rank_on_a_tabled_node_reads_its_placement_at_once(tmp_path):
    table, _ = encode_table({"n0": encode_placement({RACK: "rack-0"}, (RACK,))})
    assert placement_labels(table_environ(tmp_path, table, "n0"), timeout=30) == ({RACK: "rack-0"}, "")


@pytest.mark.parametrize("table", [b"not gzip", gzipped('{"domains": [], "nodes": {}}')])
def test_a_rank_the_table_does_not_place_reads_the_annotation(tmp_path, table):
    environ = table_environ(tmp_path, table, "n1", annotation=json.dumps({RACK: "rack-9"}))
    assert placement_labels(environ, timeout=0) == ({RACK: "rack-9"}, "")
    environ[podenv.PLACEMENT_TABLE] = str(tmp_path / "absent.json")  # rendered by `longctx render`: no table
    assert placement_labels(environ, timeout=0) == ({RACK: "rack-9"}, "")
