"""`scheduling.admission: kueue` against the real Kueue manager (hack/cluster/kueue, docs/cluster.md).

Kueue (built from its Go module, webhooks on 127.0.0.1) admits, queues, preempts and evicts the
operator's suspended Jobs on simulated GPU nodes of this module's own pool: two blocks of two
nodes (hack/cluster/nodes.py numbers 32 nodes per block). Each test has its own ClusterQueue
(named after its namespace) with a `nvidia.com/gpu` quota, and a LocalQueue in its namespace.
"""

from __future__ import annotations

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from support import operator_harness as h

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("suspend_leftovers")]
POOL = "kueue-tests"
BLOCK_LABEL = "topology.longctx.io/block"
HOSTNAME = "kubernetes.io/hostname"
GPUS_PER_NODE = 8
KUEUE_API = "kueue.x-k8s.io/v1beta2"


@pytest.fixture(scope="module")
def operator(cluster, kueue, admin_kubectl, tmp_path_factory):
    """The operator, watching Kueue's Workloads, and the pool's four nodes in two blocks."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=2, align=32) + h.add_pool_nodes(
        admin_kubectl, POOL, count=2, align=32
    )
    with h.running_operator(
        admin_kubectl, tmp_path_factory.mktemp("operator"), nodes, {"readKueueWorkloads": True}
    ) as op:
        yield op


@pytest.fixture
def queue(operator, kubectl, admin_kubectl, namespace):
    """Makes this test's ClusterQueue (quota in nodes' worth of GPUs, a flavor for the pool's nodes,
    optionally with a Topology) and its LocalQueue `q`; removes the cluster-scoped ones after."""
    made: list[tuple[str, str]] = []

    def make(nodes: int, topology: list[str] | None = None, preemption: dict | None = None) -> str:
        flavor = {"nodeLabels": {h.POOL_LABEL: POOL}}
        if topology:
            admin_kubectl.apply(
                {
                    "apiVersion": KUEUE_API,
                    "kind": "Topology",
                    "metadata": {"name": namespace},
                    "spec": {"levels": [{"nodeLabel": label} for label in topology]},
                }
            )
            made.append(("topology", namespace))
            flavor["topologyName"] = namespace
        admin_kubectl.apply(
            {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": namespace}, "spec": flavor},
            {
                "apiVersion": KUEUE_API,
                "kind": "ClusterQueue",
                "metadata": {"name": namespace},
                "spec": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                    "resourceGroups": [
                        {
                            "coveredResources": ["nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": namespace,
                                    "resources": [{"name": "nvidia.com/gpu", "nominalQuota": nodes * GPUS_PER_NODE}],
                                }
                            ],
                        }
                    ],
                    **({"preemption": preemption} if preemption else {}),
                },
            },
        )
        made[:0] = [("clusterqueue", namespace), ("resourceflavor", namespace)]
        kubectl.apply(
            {
                "apiVersion": KUEUE_API,
                "kind": "LocalQueue",
                "metadata": {"name": "q"},
                "spec": {"clusterQueue": namespace},
            }
        )
        return "q"

    yield make
    for kind, name in made:
        admin_kubectl.run("delete", f"{kind}.kueue.x-k8s.io", name, "--wait=false", check=False)


def pool_nodes(kubectl) -> list[str]:
    """The pool's node names in index order: two of the first block, then two of the second."""
    return sorted(n["metadata"]["name"] for n in kubectl.json("get", "nodes", "-l", f"{h.POOL_LABEL}={POOL}")["items"])


def kueue_job(name: str, queue: str, pod_annotations: dict, **scheduling) -> dict:
    scheduling = {"admission": "kueue", "queueName": queue, "nodeSelector": {h.POOL_LABEL: POOL}, **scheduling}
    return h.job_manifest(name, pod_annotations=pod_annotations, scheduling=scheduling)


def status(kubectl, name: str) -> dict:
    return kubectl.json("get", "lcj", name).get("status") or {}


def test_a_job_over_the_quota_waits_with_kueues_reason_and_runs_after_the_first(kubectl, queue, wait_until):
    q = queue(nodes=2)
    kubectl.apply(kueue_job("first", q, {"longctx.io/complete-after": "15s"}))
    h.wait_phase(kubectl, wait_until, "first", "Running", timeout=60)
    job = kubectl.json("get", "job", "first-g1")  # created suspended in the queue, unsuspended by Kueue
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == q and job["spec"]["suspend"] is False
    kubectl.apply(kueue_job("second", q, {"longctx.io/complete-after": "2s"}))

    def kueue_says_why():
        s = status(kubectl, "second")
        return s if "insufficient unused quota" in (s.get("message") or "") else None

    waiting = wait_until(kueue_says_why, timeout=30, what="second's status with Kueue's reason")
    assert waiting["phase"] == "Pending" and waiting["reason"] == reasons.QUEUED_IN_KUEUE
    admitted = next(c for c in waiting["conditions"] if c["type"] == cond.ADMITTED)
    assert (admitted["status"], admitted["reason"]) == ("False", reasons.QUEUED_IN_KUEUE)
    assert "Kueue: Pending: couldn't assign flavors to pod set main" in admitted["message"]
    assert kubectl.pods("longctx.io/job-name=second") == []
    assert kubectl.json("get", "job", "second-g1")["spec"]["suspend"] is True
    table = kubectl.run("get", "lcj", "second", "-o", "wide").stdout
    assert reasons.QUEUED_IN_KUEUE in table and "insufficient unused quota" in table

    first = h.wait_phase(kubectl, wait_until, "first", "Succeeded", timeout=60)
    second = h.wait_phase(kubectl, wait_until, "second", "Succeeded", timeout=60)
    assert h.conditions(second)[cond.ADMITTED] == ("True", reasons.ADMITTED_BY_KUEUE)
    assert first["status"]["completionTime"] <= next(
        c["lastTransitionTime"] for c in second["status"]["conditions"] if c["type"] == cond.ADMITTED
    )
    assert second["status"]["workloadGeneration"] == 1 and second["status"]["restarts"] == 0


def test_a_higher_priority_job_preempts_the_whole_gang_whose_same_job_resumes_later(
    kubectl, admin_kubectl, queue, wait_until
):
    for name, value in (("kueue-tests-low", 10), ("kueue-tests-high", 1000)):
        admin_kubectl.apply(
            {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
        )
    q = queue(nodes=2, preemption={"withinClusterQueue": "LowerPriority"})
    kubectl.apply(
        kueue_job("low", q, {"longctx.io/complete-after": "10s"}, workloadPriorityClassName="kueue-tests-low")
    )
    h.wait_phase(kubectl, wait_until, "low", "Running", timeout=60)
    kubectl.apply(
        kueue_job("high", q, {"longctx.io/complete-after": "6s"}, workloadPriorityClassName="kueue-tests-high")
    )

    def evicted():
        s = status(kubectl, "low")
        return s if s.get("reason") == reasons.EVICTED_BY_KUEUE else None

    low = wait_until(evicted, timeout=60, what="low evicted by Kueue")
    assert "Preempted" in low["message"] and low["restarts"] == 0  # Kueue's reason, once its Workload says
    h.wait_phase(kubectl, wait_until, "high", "Running", timeout=60)
    assert [p for p in kubectl.pods("longctx.io/job-name=low") if p["status"]["phase"] == "Running"] == []

    # The same Job waited, suspended, and resumed when Kueue admitted it again: no new generation.
    done = h.wait_phase(kubectl, wait_until, "low", "Succeeded", timeout=120)
    assert done["status"]["workloadGeneration"] == 1 and done["status"]["restarts"] == 0
    assert h.children(kubectl, "low")["jobs"] == ["low-g1"]
    assert done["status"]["lastRestart"]["reason"] == reasons.EVICTED_BY_KUEUE
    assert h.conditions(done)[cond.ADMITTED] == ("True", reasons.ADMITTED_BY_KUEUE)
    h.wait_event(kubectl, wait_until, "low", "Normal", reasons.COMPLETED)
    assert h.events(kubectl, "low").count(("Warning", reasons.EVICTED_BY_KUEUE)) == 1
    assert cond.RESTARTING not in h.conditions(done)
    assert h.wait_phase(kubectl, wait_until, "high", "Succeeded")["status"]["workloadGeneration"] == 1


def test_a_gang_that_cannot_start_is_requeued_by_kueue_alone(kubectl, kueue, queue, wait_until):
    if kueue.pods_ready_timeout is None:
        pytest.skip("the running Kueue has no waitForPodsReady (a reused cluster's Kueue)")
    q = queue(nodes=2)
    nowhere = {h.POOL_LABEL: POOL, "longctx.io/no-such-node": "true"}  # admitted by quota, never scheduled
    job = kueue_job("stuck", q, {}, nodeSelector=nowhere, startupTimeoutSeconds=600)
    kubectl.apply(job)

    def requeued():
        s = status(kubectl, "stuck")
        return s if (s.get("lastRestart") or {}).get("reason") == reasons.EVICTED_BY_KUEUE else None

    # Kueue's requeue backoff applies to the same Job's Workload; no generation is made.
    s = wait_until(requeued, timeout=kueue.pods_ready_timeout * 3 + 30, what="Kueue's eviction and requeue")
    assert s["restarts"] == 0 and cond.RESTARTING not in {c["type"] for c in s["conditions"]}
    assert s["workloadGeneration"] == 1 and h.children(kubectl, "stuck")["jobs"] == ["stuck-g1"]
    (workload,) = kubectl.json("get", "workloads.kueue.x-k8s.io")["items"]
    assert workload["status"]["requeueState"]["count"] >= 1
    evicted = h.wait_event(kubectl, wait_until, "stuck", "Warning", reasons.EVICTED_BY_KUEUE)
    assert reasons.STARTUP_TIMEOUT not in [e["reason"] for e in h.event_objects(kubectl, "stuck")]
    assert "evicted it: PodsReadyTimeout" in evicted["message"]


@pytest.mark.parametrize("mode", ["required", "preferred"])
def test_kueue_topology_places_the_whole_gang_in_one_block(kubectl, queue, wait_until, mode):
    """One node of the first block is taken, so a gang of two fits only in the second block;
    without Kueue's topology-aware scheduling the scheduler may split it across both."""
    q = queue(nodes=4, topology=[BLOCK_LABEL, HOSTNAME])
    first, *_, last = pool_nodes(kubectl)
    hog = kueue_job("hog", q, {"longctx.io/keep-running": "true"}, nodeSelector={h.POOL_LABEL: POOL, HOSTNAME: first})
    hog["spec"]["resources"]["nodes"] = 1
    kubectl.apply(hog)
    h.wait_phase(kubectl, wait_until, "hog", "Running", timeout=60)
    kubectl.apply(
        kueue_job("packed", q, {"longctx.io/complete-after": "5s"}, kueueTopology=mode, topologyKey=BLOCK_LABEL)
    )
    h.wait_phase(kubectl, wait_until, "packed", "Running", timeout=60)
    pods = kubectl.pods("longctx.io/job-name=packed")
    assert pods[0]["metadata"]["annotations"][f"kueue.x-k8s.io/podset-{mode}-topology"] == BLOCK_LABEL
    nodes = {p["spec"]["nodeName"] for p in pods}
    blocks = {kubectl.json("get", "node", n)["metadata"]["labels"][BLOCK_LABEL] for n in nodes}
    second_block = kubectl.json("get", "node", last)["metadata"]["labels"][BLOCK_LABEL]
    assert len(nodes) == 2 and blocks == {second_block}
    # Kueue's topology-aware scheduling chose those nodes (not only the pods' own affinity).
    [workload] = [
        w
        for w in kubectl.json("get", "workloads.kueue.x-k8s.io")["items"]
        if any(ref["name"] == "packed-g1" for ref in w["metadata"].get("ownerReferences", []))
    ]
    assignment = workload["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    assert assignment["levels"] == [HOSTNAME], assignment
    [chosen] = [level["individual"] for s in assignment["slices"] for level in s["valuesPerLevel"]]
    assert {chosen.get("prefix", "") + root + chosen.get("suffix", "") for root in chosen["roots"]} == nodes
