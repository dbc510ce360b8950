"""`helm install --wait` of charts/longctx on the local control plane, in cluster and namespace
scope: the CRD is established, the operator Deployment becomes available (KWOK plays the kubelet),
the operator's service account may do exactly what the operator does (asked of the authorizer),
Kueue's Workloads only with readKueueWorkloads, its writes are refused in the excluded system
namespaces, and `helm uninstall` removes what the release created."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import yaml

from longctx_operator.api.crd import CRD_NAME

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "longctx"
RULES = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
# The simulated nodes are GPU nodes with the nvidia.com/gpu taint; the operator pod tolerates it here.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")

# Every Kubernetes API call of the operator, as (verb, resource, subresource), with where it is made.
# The chart's rules must grant these and nothing else.
OPERATOR_CALLS_NAMESPACED = {
    ("list", "longcontextjobs.longctx.io", ""),
    ("watch", "longcontextjobs.longctx.io", ""),  # handlers: kopf.on.event
    ("patch", "longcontextjobs.longctx.io", "status"),  # kube.patch_status
    (
        "update",
        "longcontextjobs.longctx.io",
        "finalizers",
    ),  # blockOwnerDeletion owner references (kube.owner_reference)
    ("create", "jobs.batch", ""),
    ("delete", "jobs.batch", ""),  # kube.create_owned, kube.delete_job
    ("get", "jobs.batch", ""),
    ("get", "services", ""),
    ("get", "configmaps", ""),  # kube.create_owned: owner of a taken name; kube.read_config_map: a placement table
    ("list", "jobs.batch", ""),
    ("watch", "jobs.batch", ""),  # handlers: workload_event
    ("create", "services", ""),  # kube.create_owned (create-or-get)
    ("create", "configmaps", ""),
    ("patch", "configmaps", ""),  # kube.create_owned (create-or-update when owned)
    ("list", "pods", ""),
    ("watch", "pods", ""),  # handlers: pod_event
    ("delete", "pods", ""),  # kube.delete_pod: a broken gang's or lost node's pods (uid precondition)
    ("patch", "pods", ""),  # kube.annotate_pod: a bound rank's placement annotation (uid precondition)
    ("create", "events", ""),  # kube.post_event
}
OPERATOR_CALLS_NETWORK_POLICY = {  # only with networkPolicy.enabled: kube.create_owned
    ("create", "networkpolicies.networking.k8s.io", ""),
    ("get", "networkpolicies.networking.k8s.io", ""),
    ("patch", "networkpolicies.networking.k8s.io", ""),
}
OPERATOR_CALLS_KUEUE = {  # only with operator.readKueueWorkloads
    ("list", "workloads.kueue.x-k8s.io", ""),
    ("watch", "workloads.kueue.x-k8s.io", ""),  # handlers: kueue_workload_event
}
OPERATOR_CALLS_CLUSTER = {("list", "nodes", ""), ("watch", "nodes", "")}  # handlers: node_event (admission, placement)


def granted(rules: list[dict]) -> set[tuple[str, str, str]]:
    """(verb, resource.group, subresource) triples a list of RBAC rules grants."""
    triples = set()
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name, _, sub = resource.partition("/")
                triples |= {(verb, f"{name}.{group}" if group else name, sub) for verb in rule["verbs"]}
    return triples


def test_rule_file_grants_exactly_the_operators_calls():
    assert granted(RULES["namespaced"]) == OPERATOR_CALLS_NAMESPACED
    assert granted(RULES["kueue"]) == OPERATOR_CALLS_KUEUE
    assert granted(RULES["networkPolicy"]) == OPERATOR_CALLS_NETWORK_POLICY
    assert granted(RULES["clusterScoped"]) == OPERATOR_CALLS_CLUSTER


class Helm:
    def __init__(self, kubectl):
        self.env = kubectl.env

    def __call__(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        result = subprocess.run(["helm", *args], capture_output=True, text=True, env=self.env, timeout=timeout)
        assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{result.stderr}{result.stdout}"
        return result


class Access:
    """What the operator's service account may do, asked of the API server's authorizer with a
    SubjectAccessReview. (`kubectl auth can-i` resolves the resource through discovery first, so it
    answered "no" for Kueue's Workloads whenever Kueue's CRDs were not installed yet.)"""

    def __init__(self, admin_kubectl, namespace: str, service_account: str):
        self.admin, self.user = admin_kubectl, f"system:serviceaccount:{namespace}:{service_account}"
        # The groups the API server gives a service account's requests.
        self.groups = ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"]

    def can(self, verb: str, resource: str, subresource: str = "", namespace: str | None = None) -> bool:
        name, _, group = resource.partition(".")
        attributes = {"verb": verb, "group": group, "resource": name, "subresource": subresource}
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": self.user,
                "groups": self.groups,
                "resourceAttributes": attributes | ({"namespace": namespace} if namespace else {}),
            },
        }
        result = self.admin.run("create", "-o", "json", "-f", "-", input=json.dumps(review))
        return bool(json.loads(result.stdout)["status"].get("allowed"))

    def mismatches(
        self, expected: set[tuple[str, str, str]], resources: set[tuple[str, str]], namespace: str | None
    ) -> list[str]:
        """Every verb on every (resource, subresource) whose answer differs from `expected`."""
        wrong = []
        for resource, sub in sorted(resources):
            for verb in VERBS:
                allowed = self.can(verb, resource, sub, namespace)
                if allowed != ((verb, resource, sub) in expected):
                    wrong.append(
                        f"{verb} {resource}{'/' + sub if sub else ''} in {namespace or 'cluster scope'}: "
                        f"{'allowed' if allowed else 'denied'}"
                    )
        return wrong


NAMESPACED_RESOURCES = {
    (resource, sub)
    for _, resource, sub in OPERATOR_CALLS_NAMESPACED | OPERATOR_CALLS_KUEUE | OPERATOR_CALLS_NETWORK_POLICY
} | {("secrets", "")}
CLUSTER_RESOURCES = {("nodes", ""), ("namespaces", ""), ("customresourcedefinitions.apiextensions.k8s.io", "")}


@pytest.fixture
def release(namespace: str) -> str:
    return f"longctx-{namespace[-6:]}"


@pytest.fixture
def other_namespace(admin_kubectl):
    name = f"longctx-watched-{uuid.uuid4().hex[:6]}"
    admin_kubectl.run("create", "namespace", name)
    yield name
    admin_kubectl.run("delete", "namespace", name, "--wait=false", check=False)


def install(helm: Helm, release: str, namespace: str, tmp_path: Path, values: dict) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"tolerations": [GPU_TOLERATION], **values}))
    helm("install", release, str(CHART), "--namespace", namespace, "--values", str(path), "--wait", "--timeout", "180s")


def check_running_operator(kubectl, admin_kubectl, release: str) -> None:
    admin_kubectl.wait_established(CRD_NAME)
    deployment = kubectl.json("get", "deployment", release)
    conditions = {c["type"]: c["status"] for c in deployment["status"]["conditions"]}
    assert conditions.get("Available") == "True" and deployment["status"].get("readyReplicas") == 1, deployment[
        "status"
    ]
    [pod] = kubectl.pods(f"app.kubernetes.io/instance={release}")
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["serviceAccountName"] == release


def check_uninstall(helm: Helm, kubectl, admin_kubectl, release: str, namespaces: list[str]) -> None:
    helm("uninstall", release, "--namespace", kubectl.namespace, "--wait", "--timeout", "120s")
    selector = f"app.kubernetes.io/instance={release}"
    for ns in namespaces:
        left = admin_kubectl.json(
            "get",
            "deployments,services,configmaps,serviceaccounts,roles,rolebindings",
            "-l",
            selector,
            "--namespace",
            ns,
        )["items"]
        assert not left, [f"{o['kind']}/{o['metadata']['name']}" for o in left]
    cluster_scoped = "clusterroles,clusterrolebindings,validatingadmissionpolicies,validatingadmissionpolicybindings"
    left = admin_kubectl.json("get", cluster_scoped, "-l", selector)["items"]
    assert not left, [f"{o['kind']}/{o['metadata']['name']}" for o in left]
    # Helm never deletes CRDs from crds/ (that would delete every LongContextJob): it stays.
    admin_kubectl.run("get", "crd", "longcontextjobs.longctx.io")


@pytest.mark.slow
def test_cluster_scope_install_grants_the_operator_exactly_its_calls(
    kubectl, admin_kubectl, namespace, release, tmp_path
):
    helm = Helm(kubectl)
    install(helm, release, namespace, tmp_path, {})
    check_running_operator(kubectl, admin_kubectl, release)
    access = Access(admin_kubectl, namespace, release)
    elsewhere = f"any-{uuid.uuid4().hex[:6]}"  # cluster scope: every namespace, existing or not
    wrong = access.mismatches(OPERATOR_CALLS_NAMESPACED, NAMESPACED_RESOURCES, namespace)
    wrong += access.mismatches(OPERATOR_CALLS_NAMESPACED, NAMESPACED_RESOURCES, elsewhere)
    wrong += access.mismatches(OPERATOR_CALLS_CLUSTER, CLUSTER_RESOURCES, None)
    assert not wrong, "\n".join(wrong)
    # RBAC grants every namespace; the chart's admission policy refuses the writes in the excluded
    # ones (kube-system, ...), and only those, and only the operator's.
    operator = f"--as=system:serviceaccount:{namespace}:{release}"
    for where in ("kube-system", "kube-node-lease"):
        refused = refused_within(30, lambda where=where: dry_run_configmap(admin_kubectl, where, operator))
        assert "does not write in namespace " + where in refused.stderr, refused.stderr
        assert dry_run_configmap(admin_kubectl, where).returncode == 0  # others' writes are not touched
    assert dry_run_configmap(admin_kubectl, namespace, operator).returncode == 0
    check_uninstall(helm, kubectl, admin_kubectl, release, [namespace])
    assert not access.can("list", "nodes") and not access.can("watch", "pods", namespace=elsewhere)


def refused_within(seconds: float, attempt) -> subprocess.CompletedProcess:
    """The first refused attempt: the API server starts enforcing a new admission policy within
    about a second of its creation, not at once."""
    deadline = time.monotonic() + seconds
    while (result := attempt()).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert result.returncode != 0, f"still allowed after {seconds} s: {result.stdout}"
    return result


def dry_run_configmap(admin_kubectl, namespace: str, *impersonate: str) -> subprocess.CompletedProcess:
    """A server-side dry-run create (authorization and admission, nothing stored)."""
    name = f"longctx-probe-{uuid.uuid4().hex[:6]}"
    return admin_kubectl.run(
        "create", "configmap", name, "-n", namespace, "--dry-run=server", *impersonate, check=False
    )


@pytest.mark.slow
def test_namespace_scope_install_grants_only_the_watched_namespace(
    kubectl, admin_kubectl, namespace, release, other_namespace, tmp_path
):
    helm = Helm(kubectl)
    values = {
        "rbac": {"scope": "namespace"},
        "watchNamespaces": [other_namespace],
        "operator": {"readKueueWorkloads": True},
    }
    install(helm, release, namespace, tmp_path, values)
    check_running_operator(kubectl, admin_kubectl, release)
    config = yaml.safe_load(kubectl.json("get", "configmap", f"{release}-config")["data"]["operator.yaml"])
    assert config["watchNamespaces"] == [other_namespace] and config["readNodes"] is False
    access = Access(admin_kubectl, namespace, release)
    wrong = access.mismatches(OPERATOR_CALLS_NAMESPACED | OPERATOR_CALLS_KUEUE, NAMESPACED_RESOURCES, other_namespace)
    # Not watched: neither the release's own namespace nor any other one.
    wrong += access.mismatches(set(), NAMESPACED_RESOURCES, namespace)
    wrong += access.mismatches(set(), NAMESPACED_RESOURCES, f"any-{uuid.uuid4().hex[:6]}")
    wrong += access.mismatches(set(), CLUSTER_RESOURCES, None)
    assert not wrong, "\n".join(wrong)
    check_uninstall(helm, kubectl, admin_kubectl, release, [namespace, other_namespace])
    assert not access.can("watch", "longcontextjobs.longctx.io", namespace=other_namespace)


@pytest.mark.slow
def test_cluster_scope_with_listed_namespaces_writes_only_there(
    kubectl, admin_kubectl, namespace, release, other_namespace, tmp_path
):
    """Cluster scope watching one namespace: node reads cluster-wide, but Jobs, ConfigMaps and the
    rest only in the watched namespace, so no job author can make it write anywhere else."""
    helm = Helm(kubectl)
    install(helm, release, namespace, tmp_path, {"watchNamespaces": [other_namespace]})
    check_running_operator(kubectl, admin_kubectl, release)
    access = Access(admin_kubectl, namespace, release)
    wrong = access.mismatches(OPERATOR_CALLS_NAMESPACED, NAMESPACED_RESOURCES, other_namespace)
    wrong += access.mismatches(set(), NAMESPACED_RESOURCES, "kube-system")
    wrong += access.mismatches(set(), NAMESPACED_RESOURCES, f"any-{uuid.uuid4().hex[:6]}")
    wrong += access.mismatches(OPERATOR_CALLS_CLUSTER, CLUSTER_RESOURCES, None)
    assert not wrong, "\n".join(wrong)
    check_uninstall(helm, kubectl, admin_kubectl, release, [namespace, other_namespace])
