"""An operator killed between creating a workload's Service and its Job, then restarted, creates
exactly one of each (the explicit test hook LONGCTX_OPERATOR_TEST_EXIT_AFTER_SERVICE, docs/operator.md).
Its own module: the operator of test_operator.py must not be running at the same time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location("operator_harness", Path(__file__).with_name("operator_harness.py"))
h = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(h)

pytestmark = pytest.mark.integration


def test_killed_after_the_service_restarted_creates_exactly_one_of_each(cluster, admin_kubectl, kubectl, wait_until,
                                                                      namespace, tmp_path):
    h.install_crd(admin_kubectl)
    nodes = h.add_pool_nodes(admin_kubectl, namespace, first=810, count=2)
    try:
        run_crash_and_restart(cluster, kubectl, wait_until, namespace, tmp_path)
    finally:
        h.delete_nodes(admin_kubectl, nodes)


def run_crash_and_restart(cluster, kubectl, wait_until, namespace, tmp_path):
    from longctx_operator.kube import EXIT_AFTER_SERVICE_CODE, EXIT_AFTER_SERVICE_ENV

    crashing = h.OperatorProcess(cluster.kubeconfig, tmp_path / "first.log", env={EXIT_AFTER_SERVICE_ENV: f"{namespace}/phoenix"}).start()
    try:
        kubectl.apply(h.job_manifest("phoenix", pool=namespace, pod_annotations={"longctx.io/complete-after": "3s"}))
        assert crashing.proc.wait(timeout=60) == EXIT_AFTER_SERVICE_CODE, crashing.log()
    finally:
        crashing.stop()
    half = h.children(kubectl, "phoenix")
    assert (half["services"], half["jobs"]) == (["phoenix"], [])
    assert kubectl.json("get", "lcj", "phoenix")["status"]["currentWorkload"] == "phoenix-g1"
    second = h.OperatorProcess(cluster.kubeconfig, tmp_path / "second.log").start()
    try:
        done = h.wait_phase(kubectl, wait_until, "phoenix", "Succeeded")
    finally:
        second.stop()
    assert done["status"]["workloadGeneration"] == 1
    kids = h.children(kubectl, "phoenix")
    assert (kids["services"], kids["configmaps"], kids["jobs"]) == (["phoenix"], ["phoenix-trainer"], ["phoenix-g1"])
    assert len(kids["pods"]) == 2
