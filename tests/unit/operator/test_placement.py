"""operator/placement.py: the topology levels of a job's ranks, which jobs get the placement
table and annotation, which nodes the table holds, and which bound pods the annotation is due on;
and that a job may not ask for it itself (operator/annotations.py)."""

import json

from longctx_operator.admission import GPU
from longctx_operator.annotations import pod_annotations
from longctx_operator.api import parse_job
from longctx_operator.config import OperatorConfig
from longctx_operator.names import PLACEMENT_ANNOTATION, POD_ANNOTATIONS_ANNOTATION
from longctx_operator.placement import (
    PlacementTables,
    PodPlacement,
    config_map_table,
    placement_wanted,
    placements_due,
    topology_levels,
)
from longctx_operator.render import render_workload
from longctx_operator.resolve import resolve_layout
from longctx_trainer.contract.topology import tabled_nodes, tabled_placement
from support.jobs import job_manifest
from support.manifests import apply_case

GPU_PRODUCT, H100 = "nvidia.com/gpu.product", "NVIDIA-H100-80GB-HBM3"
ZONE, RACK, CLIQUE = "topology.kubernetes.io/zone", "example.com/rack", "nvidia.com/gpu.clique"
LEVELS = (ZONE, RACK, CLIQUE)


def spec(scheduling: dict | None = None, **changes):
    manifest = job_manifest(preset="llama3-8b", sequence_length=131072, layout=(1, 8, 4), resources=(4, 8, "h100-80gb"))
    return parse_job(apply_case(manifest, {"set": {"spec.scheduling": scheduling or {}, **changes}})).spec


def node(name: str, **labels: str) -> dict:
    return {"metadata": {"name": name, "labels": labels}}


def pod(name: str, node_name: str | None, annotation: str | None = None, phase="Running", deleting=False) -> dict:
    meta = {"name": name, "uid": f"uid-{name}", "annotations": {PLACEMENT_ANNOTATION: annotation} if annotation else {}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node_name}, "status": {"phase": phase}}


def test_levels_are_the_zone_the_operators_labels_then_the_topology_key():
    assert topology_levels(spec(), OperatorConfig()) == (ZONE, CLIQUE)
    assert topology_levels(spec(), OperatorConfig(topology_labels=[RACK])) == LEVELS
    listed = OperatorConfig(topology_labels=[CLIQUE, RACK])  # the key keeps the operator's place for it
    assert topology_levels(spec(), listed) == (ZONE, CLIQUE, RACK)
    assert topology_levels(spec({"topologyKey": ZONE}), OperatorConfig()) == (ZONE,)


def test_placement_is_written_for_topology_ordered_jax_ranks_where_nodes_are_readable():
    assert placement_wanted(spec(), OperatorConfig())
    assert not placement_wanted(spec(), OperatorConfig(read_nodes=False))  # namespace scope
    kueue = {"admission": "kueue", "queueName": "q", "kueueTopology": "required"}
    assert not placement_wanted(spec(kueue), OperatorConfig())  # Kueue placed the ranks in index order
    assert not placement_wanted(
        spec(**{"spec.trainer": {"framework": "pytorch", "command": ["torchrun", "train.py"]}}), OperatorConfig()
    )


def test_due_on_bound_live_pods_whose_annotation_is_not_their_nodes():
    nodes = {"n0": node("n0", **{ZONE: "z", RACK: "r0", "other": "x"}), "n1": node("n1", **{RACK: "r1"})}
    placed = json.dumps({RACK: "r0", ZONE: "z"}, sort_keys=True, separators=(",", ":"))
    pods = [
        pod("a", "n0"),
        pod("b", "n1", annotation='{"example.com/rack":"forged"}'),  # someone else's value: rewritten
        pod("c", "n0", annotation=placed),  # already there
        pod("d", None),  # not bound yet
        pod("e", "n9"),  # its node not cached yet
        pod("f", "n0", phase="Failed"),
        pod("g", "n0", deleting=True),
    ]
    due, unknown = placements_due(pods, nodes, LEVELS)
    assert due == [PodPlacement("a", "uid-a", placed), PodPlacement("b", "uid-b", '{"example.com/rack":"r1"}')]
    assert unknown == {"n9"}


def test_no_annotation_is_due_on_a_node_the_gangs_table_holds():
    nodes = {"n0": node("n0", **{RACK: "r0"}), "n1": node("n1", **{RACK: "r1"})}
    due, _ = placements_due([pod("a", "n0"), pod("b", "n1")], nodes, LEVELS, tabled=frozenset({"n0"}))
    assert due == [PodPlacement("b", "uid-b", '{"example.com/rack":"r1"}')]


def gpu_node(name: str, gpus: int, taint: bool = False, product: str = H100, **labels: str) -> dict:
    labels[GPU_PRODUCT] = product
    taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if taint else []
    status = {"allocatable": {GPU: str(gpus)}}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"taints": taints}, "status": status}


def test_the_table_holds_the_nodes_the_gangs_pods_may_run_on():
    """The rendered pod template's node selector and tolerations, and GPUs where it asks for them."""
    job = parse_job(apply_case(job_manifest(), {"set": {"spec.scheduling": {"nodeSelector": {"pool": "a"}}}}))
    workload = render_workload(job, resolve_layout(job.spec)[0])
    template = workload.job["spec"]["template"]
    assert template["spec"]["nodeSelector"][GPU_PRODUCT] == H100
    nodes = {
        "a0": gpu_node("a0", 8, pool="a", **{RACK: "r0"}),
        "a1": gpu_node("a1", 8, pool="a", **{RACK: "r1"}),
        "a2": gpu_node("a2", 0, pool="a", **{RACK: "r1"}),  # no GPUs
        "a3": gpu_node("a3", 8, taint=True, pool="a"),  # a taint the pods do not tolerate
        "b0": gpu_node("b0", 8, pool="b", **{RACK: "r0"}),  # another pool
        "a4": gpu_node("a4", 8, product="NVIDIA-A100", pool="a"),  # another GPU
    }
    tabled = PlacementTables().add(workload.config_map, template, nodes, (RACK,))
    text = config_map_table(workload.config_map)
    assert tabled == tabled_nodes(text) == {"a0", "a1"}
    assert [tabled_placement(text, n) for n in ("a0", "a1", "b0")] == [{RACK: "r0"}, {RACK: "r1"}, None]


def test_the_gangs_of_one_shape_share_the_walk_and_see_every_node_change(monkeypatch):
    """A second gang of the same shape (another job: its anti-affinity differs) places only the
    nodes that changed, and its table shows the change; a new node, a gone one, a relabelled one."""
    from longctx_operator import placement

    placed: list[str] = []
    real = placement.table_placement
    monkeypatch.setattr(
        placement,
        "table_placement",
        lambda pod, gpus, node, levels: placed.append(node["metadata"]["name"]) or real(pod, gpus, node, levels),
    )
    tables = PlacementTables()

    def table(name, nodes):
        job = parse_job(
            apply_case(job_manifest(name=name), {"set": {"spec.scheduling": {"nodeSelector": {"pool": "a"}}}})
        )
        workload = render_workload(job, resolve_layout(job.spec)[0])
        placed.clear()
        tabled = tables.add(workload.config_map, workload.job["spec"]["template"], nodes, (RACK,))
        text = config_map_table(workload.config_map)
        return tabled, {n: tabled_placement(text, n) for n in tabled}

    nodes = {n: gpu_node(n, 8, pool="a", **{RACK: f"r{i}"}) for i, n in enumerate(("a0", "a1", "a2"))}
    assert table("first", nodes) == ({"a0", "a1", "a2"}, {"a0": {RACK: "r0"}, "a1": {RACK: "r1"}, "a2": {RACK: "r2"}})
    assert sorted(placed) == ["a0", "a1", "a2"]
    assert table("second", dict(nodes))[0] == {"a0", "a1", "a2"} and placed == []  # nothing walked again
    nodes["a1"] = gpu_node("a1", 8, pool="a", **{RACK: "r9"})  # relabelled: a new object, as the cache puts it
    nodes["a3"] = gpu_node("a3", 8, pool="a", **{RACK: "r3"})
    del nodes["a0"]
    tabled, placements = table("third", nodes)
    assert sorted(placed) == ["a1", "a3"]
    assert placements == {"a1": {RACK: "r9"}, "a2": {RACK: "r2"}, "a3": {RACK: "r3"}}


def test_a_job_may_not_set_the_placement_annotation_even_where_its_prefix_is_allowed():
    config = OperatorConfig(allowed_pod_annotations=["longctx.io/*"])
    asked = {POD_ANNOTATIONS_ANNOTATION: json.dumps({PLACEMENT_ANNOTATION: "{}"})}
    refused = pod_annotations(asked, config)
    assert refused.values == {} and refused.error.endswith('"longctx.io/placement" is written by the operator')
    allowed = pod_annotations({POD_ANNOTATIONS_ANNOTATION: json.dumps({"longctx.io/x": "1"})}, config)
    assert allowed.values == {"longctx.io/x": "1"}
