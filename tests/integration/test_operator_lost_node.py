"""A rank's node lost, on the local control plane: the operator restarts the gang on healthy
nodes at once (docs/operator.md, "A lost node").

A KWOK node stops being managed (no kubelet: nothing reports or ends its pods) and its Ready
condition turns False; the real node lifecycle controller taints it NoExecute, the taint manager
evicts the rank's pod once restartPolicy.nodeLostSeconds ran out (DisruptionTarget), and the
operator deletes the generation and that pod (no grace period: no kubelet will confirm it) and
runs the next generation on the spare node, without waiting for the 300 s Kubernetes tolerates.
"""

from __future__ import annotations

import json

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from support import operator_harness as h

pytestmark = pytest.mark.integration
POOL = "lost-node-tests"


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    """The operator and three GPU nodes of this module's pool: a gang of two and a spare."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=3)
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes) as op:
        yield op


def lose(admin_kubectl, node: str) -> None:
    """The node's kubelet dies: KWOK stops managing it, and its Ready condition turns False."""
    admin_kubectl.run("annotate", "node", node, "kwok.x-k8s.io/node-")
    ready = next(c for c in admin_kubectl.json("get", "node", node)["status"]["conditions"] if c["type"] == "Ready")
    ready.update(status="False", reason="KubeletStopped", message="the test stopped the kubelet")
    patch = {"status": {"conditions": [ready]}}
    admin_kubectl.run("patch", "node", node, "--subresource=status", "--type=strategic", "-p", json.dumps(patch))


def test_a_lost_node_restarts_the_gang_on_the_spare_node(operator, kubectl, admin_kubectl, wait_until):
    job = h.job_manifest(
        "lost",
        pool=POOL,
        pod_annotations={"longctx.io/keep-running": "true"},
        restartPolicy={"nodeLostSeconds": 2, "maxRestarts": 2},
    )
    kubectl.apply(job)
    h.wait_phase(kubectl, wait_until, "lost", "Running")
    rank1 = kubectl.pods("longctx.io/job-name=lost,batch.kubernetes.io/job-completion-index=1")[0]
    node = rank1["spec"]["nodeName"]
    lose(admin_kubectl, node)
    # Kubernetes alone would leave the pod there for 300 s and the Job's delete waiting forever
    restarted = wait_until(
        lambda: (o := kubectl.json("get", "lcj", "lost"))["status"].get("restarts") == 1 and o,
        timeout=60,
        what="the gang restarted",
    )
    # Restarting for the lost node, or already recovered (the phase's reason moves on with admission)
    assert h.conditions(restarted)[cond.RESTARTING] in (("True", reasons.NODE_NOT_READY), ("False", reasons.RECOVERED))
    lost = h.wait_event(kubectl, wait_until, "lost", "Warning", reasons.NODE_NOT_READY)
    assert f"rank 1 (pod {rank1['metadata']['name']})" in lost["message"] and node in lost["message"]
    second = wait_until(
        lambda: (
            (o := kubectl.json("get", "lcj", "lost"))["status"].get("workloadGeneration") == 2
            and o["status"]["phase"] == "Running"
            and o
        ),
        timeout=60,
        what="generation 2 Running",
    )
    assert h.conditions(second)[cond.RESTARTING] == ("False", reasons.RECOVERED)
    pods = kubectl.pods("longctx.io/job-name=lost")
    assert {p["metadata"]["name"].startswith("lost-g2-") for p in pods} == {True}  # generation 1 is gone
    assert node not in {p["spec"]["nodeName"] for p in pods}
