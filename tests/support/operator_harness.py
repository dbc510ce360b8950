"""Shared helpers of the operator integration tests: the operator as a real process, job manifests
(`from support import operator_harness as h`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from longctx_operator.api.crd import CRD_NAME
from support import jobs, processes
from support.ports import free_port
from support.waiting import poll_until

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "crds" / "longctx.io_longcontextjobs.yaml"


# The test operator's configuration (operator/config.py): KWOK's stage annotations (longctx.io/*,
# docs/cluster.md) may reach pods, a job may point the progress scrape at a local port, name any
# priority class (the injection tests) and tolerate the simulated GPU nodes' taint.
TEST_CONFIG = {
    "allowedPodAnnotations": ["longctx.io/*"],
    "metricsUrlPrefixes": ["http://127.0.0.1:"],
    "allowedPriorityClasses": ["*"],
    "allowedTolerations": ["nvidia.com/gpu"],
    "progressIntervalSeconds": 1,
}


class OperatorProcess:
    """`longctx operator --all-namespaces --config <TEST_CONFIG>` against the test cluster,
    logging to a file."""

    def __init__(self, kubeconfig: Path, log: Path, config: dict | None = None):
        self.kubeconfig, self.log_path = kubeconfig, log
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.config_path = log.with_suffix(".config.yaml")
        self.config_path.write_text(json.dumps(TEST_CONFIG | (config or {})))
        self.env = os.environ | {"KUBECONFIG": str(kubeconfig)}
        self.proc: subprocess.Popen | None = None

    def start(self) -> OperatorProcess:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "longctx_operator.cli",
                "operator",
                "--all-namespaces",
                "--config",
                str(self.config_path),
                "--metrics-port",
                str(self.metrics_port),
                "--health-port",
                str(self.liveness_port),
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
        )
        return self

    def stop(self) -> None:
        if self.proc:
            processes.stop(self.proc, timeout=20)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]


POOL_LABEL = "longctx.io/test-pool"


class NodeIndices:
    """Hands out the indices of simulated nodes (hack/cluster/nodes.py names and addresses them by
    index) so that no two pools of a test session share one, even while an earlier pool's nodes
    are still being deleted. The cluster's own nodes (hack/cluster/up --nodes N) have 0..N-1."""

    def __init__(self, first: int):
        self.next = first

    def take(self, count: int, align: int) -> int:
        """The first of `count` fresh indices, a multiple of `align`."""
        first = -(-self.next // align) * align
        self.next = first + count
        return first


POOL_INDICES = NodeIndices(800)


def add_pool_nodes(admin_kubectl, pool: str, count: int, status: dict | None = None, align: int = 8) -> list[str]:
    """Adds `count` simulated GPU nodes (hack/cluster/nodes.py, at fresh indices: NodeIndices)
    labelled longctx.io/test-pool=<pool>, so a test's gangs neither see nor take other tests' GPUs;
    `status` replaces fields of their status (e.g. where the API server finds their kubelet). The
    first index is a multiple of `align`: 8 starts a rack (an NVLink clique), 32 a topology block."""
    first = POOL_INDICES.take(count, align)
    nodes = json.loads(
        subprocess.run(
            [sys.executable, str(REPO / "hack" / "cluster" / "nodes.py"), "--start", str(first), "--count", str(count)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    for node in nodes["items"]:
        node["metadata"]["labels"][POOL_LABEL] = pool
        node["status"].update(status or {})
    admin_kubectl.run("create", "-f", "-", input=json.dumps(nodes))
    names = [node["metadata"]["name"] for node in nodes["items"]]
    poll_until(
        lambda: all(_schedulable(admin_kubectl.json("get", "node", name)) for name in names),
        what=f"nodes {names} Ready and schedulable",
    )
    return names


def _schedulable(node: dict) -> bool:
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"].get("conditions", []))
    return ready and not any(t["key"].startswith("node.kubernetes.io/") for t in node["spec"].get("taints", []))


def delete_nodes(admin_kubectl, names: list[str]) -> None:
    if names:
        admin_kubectl.run("delete", "node", *names, "--wait=false", check=False)


def job_manifest(
    name: str,
    nodes: int = 2,
    pool: str | None = None,
    pod_annotations: dict | None = None,
    annotations: dict | None = None,
    **spec_over,
) -> dict:
    """A small GPU job for the simulated nodes (support.jobs.job_manifest): tiny model, 8 GPUs per
    node, short backoff. Each of `spec_over` replaces its spec field, or updates it where a dict."""
    meta_annotations = dict(annotations or {})
    if pod_annotations:
        meta_annotations["longctx.io/pod-annotations"] = json.dumps(pod_annotations)
    manifest = jobs.job_manifest(
        name,
        resources=(nodes, 8, "h100-80gb"),
        metadata={"annotations": meta_annotations},
        steps=10,
        restartPolicy={"maxRestarts": 1, "backoffSeconds": 1},
        scheduling={"startupTimeoutSeconds": 60},
    )
    spec = manifest["spec"]
    if pool:
        spec["scheduling"]["nodeSelector"] = {POOL_LABEL: pool}
    for key, value in spec_over.items():
        spec[key] = {**spec.get(key, {}), **value} if isinstance(value, dict) else value
    return manifest


def conditions(obj: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c.get("reason")) for c in (obj.get("status") or {}).get("conditions", [])}


def event_objects(kubectl, name: str) -> list[dict]:
    """The job's Events in the order they were created."""
    items = kubectl.json(
        "get", "events", "--field-selector", f"involvedObject.kind=LongContextJob,involvedObject.name={name}"
    )["items"]
    return sorted(items, key=lambda e: int(e["metadata"]["resourceVersion"]))


def wait_event(kubectl, wait_until, name: str, kind: str, reason: str, timeout: float = 30) -> dict:
    """The job's first Event of this type and reason, waited for: kopf posts Events from a queue of
    its own, so one can arrive after the status patch that the test saw."""

    def found():
        return next((e for e in event_objects(kubectl, name) if (e["type"], e["reason"]) == (kind, reason)), None)

    return wait_until(found, timeout=timeout, what=f"a {kind} Event {reason} of {name}")


def events(kubectl, name: str) -> list[tuple[str, str]]:
    """(type, reason) of the job's Events in the order they were created."""
    return [(e["type"], e["reason"]) for e in event_objects(kubectl, name)]


def children(kubectl, name: str) -> dict[str, list[str]]:
    selector = f"longctx.io/job-name={name}"
    return {
        kind: [o["metadata"]["name"] for o in kubectl.json("get", kind, "-l", selector)["items"]]
        for kind in ("services", "configmaps", "jobs", "pods")
    }


def wait_phase(kubectl, wait_until, name: str, phase: str, timeout: float = 90) -> dict:
    def check():
        obj = kubectl.json("get", "longcontextjob", name)
        return obj if (obj.get("status") or {}).get("phase") == phase else None

    return wait_until(check, timeout=timeout, what=f"{name} in phase {phase}")


CHART_RULES = REPO / "charts" / "longctx" / "files" / "rbac-rules.yaml"
OPERATOR_NAMESPACE = "longctx-operator-tests"
OPERATOR_ACCOUNT = "longctx"


def chart_kubeconfig(admin_kubectl, directory: Path) -> Path:
    """A kubeconfig for the chart's service account with exactly the chart's cluster-scope rights
    with every option on (charts/longctx/files/rbac-rules.yaml as one ClusterRole, Kueue's and
    NetworkPolicy's groups included), so the operator under test can do no more than an installed
    one: a missing permission fails the test, not production."""
    import yaml

    rules = yaml.safe_load(CHART_RULES.read_text())
    role = f"{OPERATOR_NAMESPACE}-{OPERATOR_ACCOUNT}"
    objects = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": rules["namespaced"] + rules["kueue"] + rules["networkPolicy"] + rules["clusterScoped"],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": OPERATOR_ACCOUNT, "namespace": OPERATOR_NAMESPACE}],
        },
    ]
    admin_kubectl.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects}))
    token = admin_kubectl.run(
        "create", "token", OPERATOR_ACCOUNT, "--namespace", OPERATOR_NAMESPACE, "--duration", "24h"
    ).stdout.strip()
    admin = json.loads(admin_kubectl.run("config", "view", "--raw", "--minify", "-o", "json").stdout)
    cluster = admin["clusters"][0]
    path = directory / "operator.kubeconfig"
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "operator",
                "clusters": [{"name": "local", "cluster": cluster["cluster"]}],
                "users": [{"name": "operator", "user": {"token": token}}],
                "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
            }
        )
    )
    return path


def install_crd(admin_kubectl) -> None:
    """Applies the CRD and waits until it is Established."""
    admin_kubectl.run("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    admin_kubectl.wait_established(CRD_NAME)


def wait_ready(url: str, timeout: float = 60, server: subprocess.Popen | None = None) -> None:
    """Until `url` answers; when the `server` process that should serve it exits first, fail now
    with its exit code rather than wait out the timeout."""
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            if server is not None and server.poll() is not None:
                raise RuntimeError(f"{url}: its server exited with {server.returncode} before answering") from None
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


@contextmanager
def running_operator(
    admin_kubectl, workdir: Path, nodes: list[str], config: dict | None = None
) -> Iterator[OperatorProcess]:
    """The operator as a process with the chart's rights (`config` over TEST_CONFIG), after the CRD
    (install_crd), yielded once its /healthz answers; afterwards it is stopped, the module's `nodes`
    deleted and its log printed."""
    install_crd(admin_kubectl)
    op = OperatorProcess(chart_kubeconfig(admin_kubectl, workdir), workdir / "operator.log", config).start()
    try:
        wait_ready(f"http://127.0.0.1:{op.liveness_port}/healthz")
        yield op
    finally:
        op.stop()
        delete_nodes(admin_kubectl, nodes)
        print(op.log())


def suspend_unfinished(kubectl, wait_until) -> None:
    """Suspends the namespace's unfinished jobs and waits for their pods to go while the operator
    and the Job controller still run (a namespace deleted under Running KWOK pods leaves them stuck:
    nothing moves them to a terminal phase, so the Job controller keeps its
    batch.kubernetes.io/job-tracking finalizer on them, and they would hold GPUs for later tests)."""
    for obj in kubectl.json("get", "lcj")["items"]:
        if (obj.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            kubectl.run("patch", "lcj", obj["metadata"]["name"], "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_until(
        lambda: (
            not [
                p
                for p in kubectl.json("get", "pods")["items"]
                if p["status"].get("phase") not in ("Succeeded", "Failed")
            ]
        ),
        timeout=60,
        what="the test's running pods gone",
    )
