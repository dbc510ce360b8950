"""Fixtures for tests against the real local control plane (hack/cluster, docs/cluster.md).

`cluster` (session): reuses a live cluster named by $LONGCTX_KUBECONFIG or <repo>/.cluster/kubeconfig
(started by `hack/cluster/up`, left running), otherwise starts a private one in a temporary folder
with $LONGCTX_CLUSTER_NODES simulated GPU nodes (default 4) and stops it at the end of the session.
`kueue` (session): Kueue's manager on that cluster, started once by the first test that asks.
`namespace` / `kubectl` (per test): a fresh namespace, deleted afterwards, and a kubectl bound to it.
`wait_until`: polls a function until it returns something truthy (a fixture, since test modules
cannot import this file under --import-mode=importlib).
`suspend_leftovers`: for modules with their own `operator` fixture that name it in
`pytest.mark.usefixtures`: after each test, its unfinished jobs suspended and their pods gone.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from support.cluster import CLUSTER_SCRIPTS, Kubectl, component_versions
from support.operator_harness import suspend_unfinished
from support.waiting import poll_until

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Cluster:
    kubeconfig: Path


def _is_live(kubeconfig: Path) -> bool:
    if not kubeconfig.is_file():
        return False
    probe = Kubectl(kubeconfig).run("get", "--raw", "/readyz", check=False, timeout=10)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    for candidate in (os.environ.get("LONGCTX_KUBECONFIG"), REPO / ".cluster" / "kubeconfig"):
        if candidate and _is_live(Path(candidate)):
            yield Cluster(Path(candidate))
            return
    state = Path(tempfile.mkdtemp(prefix="longctx-cluster-"))
    env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}
    nodes = os.environ.get("LONGCTX_CLUSTER_NODES", "4")
    try:
        subprocess.run([str(CLUSTER_SCRIPTS / "up"), "--nodes", nodes], env=env, check=True, stdout=subprocess.DEVNULL)
        yield Cluster(state / "kubeconfig")
    finally:
        subprocess.run([str(CLUSTER_SCRIPTS / "down")], env=env, check=False)
        shutil.rmtree(state, ignore_errors=True)


@dataclass(frozen=True)
class Kueue:
    """Kueue's manager running on the test cluster; `pods_ready_timeout` is its waitForPodsReady
    timeout in seconds (None where a reused cluster's Kueue runs without it)."""

    pods_ready_timeout: float | None


KUEUE_PODS_READY_TIMEOUT = 20
"""waitForPodsReady of the session's Kueue, in seconds: KWOK's pods are Ready 0.2 s after binding."""


@pytest.fixture(scope="session")
def kueue(cluster: Cluster) -> Kueue:
    """Kueue on the session's cluster (hack/cluster/kueue), started once and stopped with the
    cluster; a reused cluster's running Kueue is taken as it is."""
    state = cluster.kubeconfig.parent
    if not (state / "pids" / "kueue.pid").exists():
        env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}
        timeout = f"{KUEUE_PODS_READY_TIMEOUT}s"
        subprocess.run(
            [str(CLUSTER_SCRIPTS / "kueue"), "--pods-ready-timeout", timeout],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
    config = yaml.safe_load((state / "kueue-config.yaml").read_text())
    timeout = (config.get("waitForPodsReady") or {}).get("timeout")
    return Kueue(float(timeout.removesuffix("s")) if timeout else None)


@pytest.fixture
def namespace(cluster: Cluster, request: pytest.FixtureRequest) -> Iterator[str]:
    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    admin = Kubectl(cluster.kubeconfig)
    admin.create_namespace(name)
    yield name
    admin.run("delete", "namespace", name, "--wait=false", check=False)


@pytest.fixture
def kubectl(cluster: Cluster, namespace: str) -> Kubectl:
    return Kubectl(cluster.kubeconfig, namespace)


@pytest.fixture
def wait_until() -> Callable[..., Any]:
    return poll_until


@pytest.fixture
def suspend_leftovers(operator, kubectl: Kubectl, wait_until: Callable[..., Any]) -> Iterator[None]:
    """After each test, suspends its unfinished jobs and waits for their pods to go while the
    module's `operator` and the Job controller still run (support.operator_harness.suspend_unfinished
    says why)."""
    yield
    suspend_unfinished(kubectl, wait_until)


@pytest.fixture(scope="session")
def admin_kubectl(cluster: Cluster) -> Kubectl:
    """kubectl without a namespace, for cluster-scoped objects (nodes, CRDs)."""
    return Kubectl(cluster.kubeconfig)


class Workloads:
    """Hand-written manifests shaped like the operator's: an Indexed Job (completions = parallelism =
    workers) whose pods use a headless Service as subdomain, tolerate the nvidia.com/gpu taint and
    select GPU nodes by their GPU Feature Discovery label."""

    GPU_PRODUCT = "NVIDIA-H100-80GB-HBM3"

    @staticmethod
    def headless_service(name: str) -> dict:
        return {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": name},
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"job-name": name},
                "ports": [{"name": "coordinator", "port": 1234}],
            },
        }

    @staticmethod
    def gpu_indexed_job(name: str, workers: int, gpus_per_worker: int = 8, annotations: dict | None = None) -> dict:
        return {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name},
            "spec": {
                "completionMode": "Indexed",
                "completions": workers,
                "parallelism": workers,
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": annotations or {}},
                    "spec": {
                        "subdomain": name,
                        "restartPolicy": "Never",
                        "nodeSelector": {"nvidia.com/gpu.product": Workloads.GPU_PRODUCT},
                        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [
                            {
                                "name": "trainer",
                                "image": "longctx/trainer:test",
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus_per_worker)}},
                            }
                        ],
                    },
                },
            },
        }

    @staticmethod
    def is_running_and_ready(pod: dict) -> bool:
        conditions = {c["type"]: c["status"] for c in pod["status"].get("conditions", [])}
        return pod["status"].get("phase") == "Running" and conditions.get("Ready") == "True"


@pytest.fixture
def workloads() -> type[Workloads]:
    return Workloads


@pytest.fixture(scope="session")
def cluster_versions() -> dict[str, str]:
    return component_versions()


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO
