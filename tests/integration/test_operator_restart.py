"""An operator killed between creating a workload's Service and its Job, then restarted, creates
exactly one of each. A ResourceQuota of zero Jobs holds the first operator at that point (the API
server refuses the Job), where it is killed with SIGKILL; the quota is then lifted and a second
operator finishes the job. Its own module: the operator of test_operator.py must not be running
at the same time."""

from __future__ import annotations

import json

import pytest

from support import operator_harness as h

pytestmark = pytest.mark.integration


def test_killed_after_the_service_restarted_creates_exactly_one_of_each(
    cluster, admin_kubectl, kubectl, wait_until, namespace, tmp_path
):
    h.install_crd(admin_kubectl)
    nodes = h.add_pool_nodes(admin_kubectl, namespace, count=2)
    try:
        run_crash_and_restart(admin_kubectl, kubectl, wait_until, tmp_path)
    finally:
        h.delete_nodes(admin_kubectl, nodes)


def run_crash_and_restart(admin_kubectl, kubectl, wait_until, tmp_path):
    kubectl.apply(
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "no-jobs"},
            "spec": {"hard": {"count/jobs.batch": "0"}},
        }
    )
    crashing = h.OperatorProcess(h.chart_kubeconfig(admin_kubectl, tmp_path), tmp_path / "first.log").start()
    try:
        kubectl.apply(
            h.job_manifest("phoenix", pool=kubectl.namespace, pod_annotations={"longctx.io/complete-after": "3s"})
        )
        wait_until(
            lambda: "exceeded quota" in json.dumps(kubectl.json("get", "lcj", "phoenix").get("status")),
            timeout=60,
            what="the first operator to be refused the Job",
        )
    finally:
        crashing.proc.kill()
        crashing.proc.wait()
    half = h.children(kubectl, "phoenix")
    assert (half["services"], half["jobs"]) == (["phoenix"], [])
    assert kubectl.json("get", "lcj", "phoenix")["status"]["currentWorkload"] == "phoenix-g1"
    kubectl.run("delete", "resourcequota", "no-jobs")
    (tmp_path / "second").mkdir()
    with h.running_operator(admin_kubectl, tmp_path / "second", []):
        done = h.wait_phase(kubectl, wait_until, "phoenix", "Succeeded")
    assert done["status"]["workloadGeneration"] == 1
    kids = h.children(kubectl, "phoenix")
    assert (kids["services"], kids["configmaps"], kids["jobs"]) == (["phoenix"], ["phoenix-trainer"], ["phoenix-g1"])
    assert len(kids["pods"]) == 2
