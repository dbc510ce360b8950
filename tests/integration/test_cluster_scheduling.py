"""The real scheduler places an Indexed Job of 8-GPU workers onto the simulated GPU nodes.

The Job is written by hand (conftest's `workloads`), shaped like the one the operator renders.
"""

import pytest

pytestmark = pytest.mark.integration


def test_indexed_job_gets_gpu_nodes_and_stable_hostnames(kubectl, wait_until, workloads):
    job, workers = "ring", 4
    kubectl.apply(
        workloads.headless_service(job),
        workloads.gpu_indexed_job(job, workers, annotations={"longctx.io/keep-running": "true"}),
    )

    def all_running():
        pods = kubectl.pods(f"job-name={job}")
        return pods if len(pods) == workers and all(map(workloads.is_running_and_ready, pods)) else None

    pods = wait_until(all_running, timeout=90, what=f"{workers} running workers")

    by_index = {int(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]): p for p in pods}
    assert sorted(by_index) == list(range(workers))
    for index, pod in by_index.items():
        # <job>-<index>.<service> is what JAX_COORDINATOR_ADDRESS relies on.
        assert pod["spec"]["hostname"] == f"{job}-{index}"
        assert pod["spec"]["subdomain"] == job
    # 8 GPUs per worker on 8-GPU nodes: one worker per node, each a GPU node.
    node_names = {p["spec"]["nodeName"] for p in pods}
    assert len(node_names) == workers
    for node_name in node_names:
        node = kubectl.json("get", "node", node_name)
        assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == workloads.GPU_PRODUCT

    # The headless Service publishes each worker under its hostname (the DNS records' source).
    def published_hostnames():
        slices = kubectl.json("get", "endpointslices", "-l", f"kubernetes.io/service-name={job}")["items"]
        names = sorted(e.get("hostname", "") for s in slices for e in s.get("endpoints") or [])
        return names if len(names) == workers else None

    assert wait_until(published_hostnames, timeout=30, what="endpoint hostnames") == [
        f"{job}-{i}" for i in range(workers)
    ]


def test_job_larger_than_any_node_stays_pending_with_reason(kubectl, wait_until, workloads):
    job = "too-big"
    kubectl.apply(workloads.gpu_indexed_job(job, workers=1, gpus_per_worker=16))

    def unschedulable_condition():
        pods = kubectl.pods(f"job-name={job}")
        conditions = [c for p in pods for c in p["status"].get("conditions", []) if c["type"] == "PodScheduled"]
        return conditions[0] if conditions and conditions[0]["status"] == "False" else None

    condition = wait_until(unschedulable_condition, timeout=60, what="PodScheduled=False")
    assert condition["reason"] == "Unschedulable"
    assert "Insufficient nvidia.com/gpu" in condition["message"]

    def failed_scheduling_event():
        events = kubectl.json("get", "events", "--field-selector", "reason=FailedScheduling")["items"]
        return events[0] if events else None

    event = wait_until(failed_scheduling_event, timeout=30, what="a FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in event["message"]
    (pod,) = kubectl.pods(f"job-name={job}")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
