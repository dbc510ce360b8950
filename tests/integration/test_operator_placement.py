"""The ranks' placement on the local control plane (operator/placement.py): a gang's ConfigMap holds
the placement table of the KWOK nodes, in two racks, that its pods may run on (each node's zone,
the configuration's rack label, the job's topologyKey), which the trainer reads at start
(tests/unit/trainer/test_topology.py); a pod bound to a node that joined later gets it as the
longctx.io/placement annotation instead (a downward-API file), written back when someone else
changes it."""

from __future__ import annotations

import json

import pytest

from longctx_operator.names import PLACEMENT_ANNOTATION, PLACEMENT_TABLE_FILE, config_map_name
from longctx_operator.placement import config_map_table
from longctx_trainer.contract import podenv
from longctx_trainer.contract.topology import tabled_nodes, tabled_placement
from support import operator_harness as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("suspend_leftovers")]
POOL = "placement-tests"
RACK, ZONE, CLIQUE = "topology.longctx.io/rack", "topology.kubernetes.io/zone", "nvidia.com/gpu.clique"


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    """The operator ordering rings by rack, and two nodes in one rack and one in another (align 8: a
    rack)."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=2) + h.add_pool_nodes(admin_kubectl, POOL, count=1)
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


def table(kubectl, job: str) -> bytes:
    return config_map_table(kubectl.json("get", "configmap", config_map_name(job)))


def test_ranks_read_their_placement_from_the_table_and_a_later_node_gets_the_annotation(
    operator, kubectl, admin_kubectl, wait_until
):
    """Four ranks, admission none: three bind to the module's nodes, which the gang's table holds,
    and get no annotation; the fourth waits for a node added after the gang was created, which the
    table lacks, and gets the annotation, written back when someone else changes it."""
    keep_running = {"longctx.io/keep-running": "true"}
    job = h.job_manifest("racks", nodes=4, pool=POOL, pod_annotations=keep_running, scheduling={"admission": "none"})
    kubectl.apply(job)

    def bound() -> dict[str, str]:
        return {p["metadata"]["name"]: p["spec"].get("nodeName") for p in kubectl.pods("longctx.io/job-name=racks")}

    wait_until(lambda: sum(bool(n) for n in bound().values()) == 3, timeout=60, what="three ranks bound")
    container = kubectl.pods("longctx.io/job-name=racks")[0]["spec"]["containers"][0]
    env = {v["name"]: v.get("value") for v in container["env"]}
    assert env[podenv.TOPOLOGY_LEVELS] == f"{ZONE},{RACK},{CLIQUE}"
    assert env[podenv.PLACEMENT_TABLE] == f"/etc/longctx/{PLACEMENT_TABLE_FILE}"
    assert env[podenv.PLACEMENT_FILE] == "/etc/longctx/placement.json"

    def expected(node: str) -> dict[str, str]:
        labels = admin_kubectl.json("get", "node", node)["metadata"]["labels"]
        return {key: labels[key] for key in (ZONE, RACK, CLIQUE)}

    text = table(kubectl, "racks")
    assert tabled_nodes(text) == set(operator.nodes)  # the pool's nodes, no other test's
    assert {n: tabled_placement(text, n) for n in operator.nodes} == {n: expected(n) for n in operator.nodes}
    assert len({expected(n)[RACK] for n in operator.nodes}) == 2  # the table spans both racks

    late = h.add_pool_nodes(admin_kubectl, POOL, count=1)
    operator.nodes.extend(late)  # deleted with the module's
    wait_until(lambda: late[0] in bound().values(), timeout=60, what="the fourth rank bound to the new node")
    fourth = next(name for name, node in bound().items() if node == late[0])
    wait_until(lambda: placements(kubectl)[fourth] is not None, timeout=30, what="the fourth rank's placement")
    assert json.loads(placements(kubectl)[fourth]) == expected(late[0])
    assert tabled_placement(table(kubectl, "racks"), late[0]) is None
    # The pass that wrote it saw every rank: those on tabled nodes got none.
    assert [name for name, value in placements(kubectl).items() if value is not None] == [fourth]

    # A tenant's own value is not the node's: the operator writes the node's back.
    kubectl.run("annotate", "pod", fourth, "--overwrite", f'{PLACEMENT_ANNOTATION}={{"{RACK}": "forged"}}')
    wait_until(
        lambda: json.loads(placements(kubectl)[fourth] or "{}") == expected(late[0]),
        timeout=30,
        what="the forged placement rewritten",
    )
