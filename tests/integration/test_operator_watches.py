"""The operator's watches on the real control plane (operator/watch.py, operator/occupancy.py): pods
that are not a job's never reach it, and builtin admission still counts the GPUs they hold."""

from __future__ import annotations

import time
import urllib.request

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from support import operator_harness as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("suspend_leftovers")]
FAST = {"longctx.io/complete-after": "4s"}
POOL = "operator-watch-tests"
PODS_DELIVERED = 'longctx_operator_watch_events_total{resource="pods"}'


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=2)
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes) as op:
        op.nodes = nodes
        yield op


def delivered(operator) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return next(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(PODS_DELIVERED))


def foreign_pod(name: str, gpus: int = 0, node: str | None = None) -> dict:
    """A pod of someone else: no job-name label; bound to `node` when given, else never scheduled."""
    spec = {
        "containers": [
            {"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}
        ],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {"no-such-node": "x"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "theirs"}}, "spec": spec}


def test_pods_that_are_not_a_jobs_never_reach_the_operator(operator, kubectl, wait_until):
    kubectl.apply(h.job_manifest("counted", pool=POOL, pod_annotations=FAST))
    h.wait_phase(kubectl, wait_until, "counted", "Succeeded", timeout=90)
    time.sleep(2)  # the job's last pod events
    before = delivered(operator)
    assert before >= 2  # the job's two pods came through the watch
    for i in range(10):
        kubectl.apply(foreign_pod(f"theirs-{i}"))
    kubectl.run("label", "pod", "theirs-0", "app=changed", "--overwrite")
    kubectl.run("delete", "pod", *[f"theirs-{i}" for i in range(10)], "--grace-period=0", "--force")
    time.sleep(3)
    assert delivered(operator) == before  # 30 pod events in the cluster, none sent to the operator


def test_builtin_admission_refuses_while_a_foreign_pod_holds_gpus_then_admits(operator, kubectl, wait_until):
    kubectl.apply(foreign_pod("holder", gpus=8, node=operator.nodes[0]))
    wait_until(lambda: kubectl.json("get", "pod", "holder")["status"].get("phase") == "Running", timeout=30)
    kubectl.apply(h.job_manifest("blocked", pool=POOL, pod_annotations=FAST))
    wait_until(
        lambda: (kubectl.json("get", "lcj", "blocked").get("status") or {}).get("reason") == reasons.INSUFFICIENT_GPUS,
        timeout=30,
        what="the gang refused",
    )
    pending = kubectl.json("get", "lcj", "blocked")
    assert "1 available of 2 matching nodes" in pending["status"]["message"]
    assert h.children(kubectl, "blocked")["jobs"] == []
    kubectl.run("delete", "pod", "holder", "--grace-period=0", "--force")
    done = h.wait_phase(kubectl, wait_until, "blocked", "Succeeded", timeout=90)
    assert h.conditions(done)[cond.ADMITTED] == ("True", reasons.GANG_FITS)


def test_builtin_admission_refuses_while_a_node_is_cordoned_then_admits_on_uncordon(
    operator, admin_kubectl, kubectl, wait_until
):
    """The node matching admission remembers (admission.NodeMatches) follows a node that changes:
    a cordoned node is not counted, and uncordoning it (the node's object replaced in the cache,
    unlike its heartbeats) lets the waiting gang in."""
    admin_kubectl.run("cordon", operator.nodes[1])
    try:
        kubectl.apply(h.job_manifest("cordoned", pool=POOL, pod_annotations=FAST))
        wait_until(
            lambda: (
                (kubectl.json("get", "lcj", "cordoned").get("status") or {}).get("reason") == reasons.INSUFFICIENT_GPUS
            ),
            timeout=30,
            what="the gang refused",
        )
        assert "1 available of 1 matching nodes" in kubectl.json("get", "lcj", "cordoned")["status"]["message"]
        assert h.children(kubectl, "cordoned")["jobs"] == []
    finally:
        admin_kubectl.run("uncordon", operator.nodes[1])
    done = h.wait_phase(kubectl, wait_until, "cordoned", "Succeeded", timeout=90)
    assert h.conditions(done)[cond.ADMITTED] == ("True", reasons.GANG_FITS)
