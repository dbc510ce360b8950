"""The ranks' placement on the local control plane (operator/placement.py): once a gang's pods are
bound to KWOK nodes in two racks, the operator writes each pod's node topology (zone, the
configuration's rack label, the job's topologyKey) onto it as the longctx.io/placement annotation,
which the trainer reads through a downward-API file (tests/unit/trainer/test_topology.py), and
writes it back when someone else changes it."""

from __future__ import annotations

import json

import pytest

from longctx_operator.names import PLACEMENT_ANNOTATION
from longctx_trainer.contract import podenv
from support import operator_harness as h

pytestmark = pytest.mark.integration
POOL = "placement-tests"
RACK, ZONE, CLIQUE = "topology.longctx.io/rack", "topology.kubernetes.io/zone", "nvidia.com/gpu.clique"


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    """The operator ordering rings by rack, and two nodes in each of two racks (align 8: a rack)."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=2) + h.add_pool_nodes(admin_kubectl, POOL, count=2)
    config = {"topologyLabels": [RACK]}
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes, config) as op:
        op.nodes = nodes
        yield op


def placements(kubectl) -> dict[str, str | None]:
    """Pod name -> its placement annotation (None where there is none yet)."""
    return {
        p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(PLACEMENT_ANNOTATION)
        for p in kubectl.pods("longctx.io/job-name=racks")
    }


def test_bound_ranks_get_their_nodes_topology_and_keep_it(operator, kubectl, admin_kubectl, wait_until):
    job = h.job_manifest("racks", nodes=4, pool=POOL, pod_annotations={"longctx.io/keep-running": "true"})
    kubectl.apply(job)
    try:
        h.wait_phase(kubectl, wait_until, "racks", "Running")
        pods = kubectl.pods("longctx.io/job-name=racks")
        container = pods[0]["spec"]["containers"][0]
        env = {v["name"]: v.get("value") for v in container["env"]}
        assert env[podenv.TOPOLOGY_LEVELS] == f"{ZONE},{RACK},{CLIQUE}"
        assert env[podenv.PLACEMENT_FILE] == "/etc/longctx/placement.json"

        def expected(pod: dict) -> dict[str, str]:
            labels = admin_kubectl.json("get", "node", pod["spec"]["nodeName"])["metadata"]["labels"]
            return {key: labels[key] for key in (ZONE, RACK, CLIQUE)}

        wanted = {p["metadata"]["name"]: expected(p) for p in pods}
        assert len({w[RACK] for w in wanted.values()}) == 2, wanted  # the gang spans both racks
        wait_until(lambda: all(v is not None for v in placements(kubectl).values()), timeout=30, what="every placement")
        assert {name: json.loads(value) for name, value in placements(kubectl).items()} == wanted

        # A tenant's own value is not the node's: the operator writes the node's back.
        victim = sorted(wanted)[0]
        kubectl.run("annotate", "pod", victim, "--overwrite", f'{PLACEMENT_ANNOTATION}={{"{RACK}": "forged"}}')
        wait_until(
            lambda: json.loads(placements(kubectl)[victim] or "{}") == wanted[victim],
            timeout=30,
            what="the forged placement rewritten",
        )
    finally:
        h.suspend_unfinished(kubectl, wait_until)
