"""KWOK's stages (hack/cluster/stages.yaml) drive pods as docs/cluster.md promises: Job pods finish,
annotated pods fail with the requested exit code, deleted pods go away."""

import pytest

pytestmark = pytest.mark.integration


def job_condition(kubectl, job: str, kind: str):
    conditions = kubectl.json("get", "job", job)["status"].get("conditions", [])
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


def exit_codes(pod: dict) -> list[int]:
    return [
        s["state"]["terminated"]["exitCode"]
        for s in pod["status"].get("containerStatuses", [])
        if "terminated" in s["state"]
    ]


def test_job_pods_complete_after_the_requested_delay(kubectl, wait_until, workloads):
    kubectl.apply(workloads.gpu_indexed_job("done", workers=2, annotations={"longctx.io/complete-after": "2s"}))
    wait_until(lambda: job_condition(kubectl, "done", "Complete"), timeout=60, what="Job Complete")
    pods = kubectl.pods("job-name=done")
    assert [p["status"]["phase"] for p in pods] == ["Succeeded", "Succeeded"]
    assert [exit_codes(p) for p in pods] == [[0], [0]]


def test_pod_annotated_in_template_fails_with_its_exit_code(kubectl, wait_until, workloads):
    annotations = {"longctx.io/fail": "true", "longctx.io/exit-code": "3", "longctx.io/fail-after": "500ms"}
    kubectl.apply(workloads.gpu_indexed_job("broken", workers=1, annotations=annotations))
    wait_until(lambda: job_condition(kubectl, "broken", "Failed"), timeout=60, what="Job Failed")
    (pod,) = kubectl.pods("job-name=broken")
    assert pod["status"]["phase"] == "Failed"
    assert exit_codes(pod) == [3]


def test_annotating_a_running_pod_makes_only_that_pod_fail(kubectl, wait_until, workloads):
    kubectl.apply(workloads.gpu_indexed_job("victim", workers=2, annotations={"longctx.io/keep-running": "true"}))

    def running_pods():
        pods = kubectl.pods("job-name=victim")
        return pods if len(pods) == 2 and all(map(workloads.is_running_and_ready, pods)) else None

    pods = wait_until(running_pods, timeout=60, what="2 running pods")
    chosen = next(p for p in pods if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1")
    name = chosen["metadata"]["name"]
    kubectl.run("annotate", "pod", name, "longctx.io/fail=true", "longctx.io/exit-code=7", "longctx.io/fail-after=0s")

    def failed_pod():
        pod = kubectl.json("get", "pod", name)
        return pod if pod["status"]["phase"] == "Failed" else None

    assert exit_codes(wait_until(failed_pod, timeout=30, what=f"{name} Failed")) == [7]
    # backoffLimit 0: the Job fails on its first failed pod.
    assert wait_until(lambda: job_condition(kubectl, "victim", "Failed"), timeout=30, what="Job Failed")


def test_deleted_job_leaves_no_pods_behind(kubectl, wait_until, workloads):
    kubectl.apply(workloads.gpu_indexed_job("gone", workers=2, annotations={"longctx.io/keep-running": "true"}))
    wait_until(lambda: len(kubectl.pods("job-name=gone")) == 2, timeout=60, what="2 pods")
    kubectl.run("delete", "job", "gone", "--cascade=foreground", "--wait=false")
    # No kubelet finishes the graceful deletion: the pod-remove stage must.
    wait_until(lambda: not kubectl.pods("job-name=gone"), timeout=60, what="the pods to disappear")
