"""observe.lost_node and observe_workload on a gang whose node is lost: the pod the taint manager
marks for disruption once its NotReady node's toleration ran out, as the local control plane
showed it (tests/integration/test_operator_lost_node.py): DisruptionTarget True with reason
DeletionByTaintManager, being deleted, and still Ready (nothing updates a dead kubelet's pods)."""

from datetime import UTC, datetime

from longctx_operator.observe import LostPod, lost_node, observe_workload

JOB = {
    "metadata": {"name": "j-g1", "uid": "u1", "creationTimestamp": "2026-01-02T03:04:05Z"},
    "spec": {"completions": 2, "parallelism": 2},
    "status": {},
}


def pod(rank, ready=True, disruption=None, deleting=False, reason=None):
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if disruption:
        conditions.append(
            {"type": "DisruptionTarget", "status": "True", "reason": disruption, "message": "Taint manager: deleting"}
        )
    meta = {"name": f"j-g1-{rank}-abc", "labels": {"batch.kubernetes.io/job-completion-index": str(rank)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-02T03:05:00Z"
    status = {"phase": "Running", "conditions": conditions}
    if reason:
        status["reason"] = reason
    return {"metadata": meta, "spec": {"nodeName": f"node-{rank}"}, "status": status}


def test_a_pod_evicted_by_the_taint_manager_from_a_not_ready_node_is_lost():
    evicted = pod(1, ready=True, disruption="DeletionByTaintManager", deleting=True)
    assert "node node-1 is NotReady or unreachable" in lost_node(evicted)
    seen = observe_workload(JOB, [pod(0), evicted])
    assert seen.failure.node_lost and (seen.failure.rank, seen.failure.pod) == (1, "j-g1-1-abc")
    assert seen.lost_pods == (LostPod("j-g1-1-abc", datetime(2026, 1, 2, 3, 5, tzinfo=UTC)),)


def test_the_node_lifecycle_controllers_node_lost_reason_is_lost():
    assert lost_node(pod(0, ready=False, reason="NodeLost")) is not None


def test_other_disruptions_are_not_a_lost_node():
    """A drain (the eviction API) or a preemption ends the pod through its kubelet: the ordinary
    failure path handles them; a pod merely not Ready is not lost."""
    assert lost_node(pod(0, ready=False, disruption="EvictionByEvictionAPI", deleting=True)) is None
    assert lost_node(pod(0, ready=False, disruption="PreemptionByScheduler", deleting=True)) is None
    assert lost_node(pod(0, ready=False)) is None
    assert observe_workload(JOB, [pod(0), pod(1, ready=False)]).lost_pods == ()
