"""The Helm chart: lint, render with default and non-default values, schema rejections, and the
files it embeds (CRD, dashboard, alert rules, RBAC rules) kept identical to their sources.
Integration tier: it needs the Helm binary (hack/cluster/build) and the Prometheus Operator's CRDs
from the Go module proxy."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
import yaml

from longctx_operator import reasons
from longctx_operator.config import OperatorConfig

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "longctx"
MONITORING = "monitoring.coreos.com/v1"
KUBERNETES_VERSION = "1.36.0"
# The Prometheus Operator release whose CRD schemas the monitors are checked against.
PROMETHEUS_OPERATOR = "github.com/prometheus-operator/prometheus-operator@v0.85.0"
NON_DEFAULT_VALUES = {
    "image": {"repository": "registry.example.com/ml/longctx-operator", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "rbac": {"scope": "namespace"},
    "watchNamespaces": ["ml-a", "ml-b"],
    "serviceAccount": {"name": "longctx-op", "annotations": {"example.com/team": "ml"}},
    "defaults": {
        "trainerImage": {"repository": "registry.example.com/ml/longctx-trainer", "tag": "0.1.0-cuda13"},
        "tcpxoDaemonImage": "registry.example.com/gcp/tcpgpudmarxd:v1.0.99",
    },
    "operator": {
        "healthPort": 18080,
        "metricsPort": 18000,
        "readKueueWorkloads": True,
        "admissionModes": ["kueue"],
        "forceAdmission": "kueue",
        "defaultKueueQueue": "shared",
    },
    "metrics": {
        "service": {"port": 18000},
        "serviceMonitor": {"labels": {"release": "kube-prometheus"}, "interval": "1m"},
        "podMonitor": {"labels": {"release": "kube-prometheus"}, "interval": "10s"},
    },
    "dashboard": {"namespace": "monitoring", "annotations": {"grafana_folder": "Training"}},
    "nodeSelector": {"node-role.kubernetes.io/control-plane": ""},
    "tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}],
}


def locate_helm() -> str:
    """Helm: $LONGCTX_HELM, else the binary hack/cluster/build caches (built here when missing)."""
    if os.environ.get("LONGCTX_HELM"):
        return os.environ["LONGCTX_HELM"]
    folders = (
        subprocess.run([str(ROOT / "hack" / "cluster" / "path")], check=True, capture_output=True, text=True)
        .stdout.strip()
        .split(":")
    )
    [folder] = [Path(folder) for folder in folders if Path(folder).parent.name.startswith("helm-")]
    if not (folder / "helm").exists():
        subprocess.run([str(ROOT / "hack" / "cluster" / "build"), "helm"], check=True)
    return str(folder / "helm")


@pytest.fixture(scope="module")
def helm() -> str:
    return locate_helm()


def run_helm(helm: str, *args: str, values: dict | None = None, tmp_path: Path | None = None):
    command = [helm, *args]
    if values is not None:
        path = tmp_path / "values.yaml"
        path.write_text(yaml.safe_dump(values))
        command += ["--values", str(path)]
    return subprocess.run(command, capture_output=True, text=True)


def render(
    helm: str, tmp_path: Path, values: dict | None = None, api_versions=(), extra=(), chart: Path = CHART
) -> list[dict]:
    flags = [f"--api-versions={api}" for api in api_versions]
    result = run_helm(
        helm,
        "template",
        "longctx",
        str(chart),
        "--namespace",
        "longctx-system",
        "--kube-version",
        KUBERNETES_VERSION,
        "--include-crds",
        *flags,
        *extra,
        values=values,
        tmp_path=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: list[dict], kind: str) -> dict:
    [obj] = by_kind(objects, kind)
    return obj


def operator_container(objects: list[dict]) -> dict:
    [container] = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    return container


@pytest.fixture(scope="module")
def default_objects(helm, tmp_path_factory):
    return render(helm, tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="module")
def custom_objects(helm, tmp_path_factory):
    return render(helm, tmp_path_factory.mktemp("custom"), NON_DEFAULT_VALUES, api_versions=[MONITORING])


@pytest.mark.parametrize("values", [None, NON_DEFAULT_VALUES], ids=["default", "non-default"])
def test_helm_lint_passes_strictly(helm, tmp_path, values):
    result = run_helm(
        helm, "lint", "--strict", "--kube-version", KUBERNETES_VERSION, str(CHART), values=values, tmp_path=tmp_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("fixture", ["default_objects", "custom_objects"])
def test_rendered_core_objects_are_valid_kubernetes(request, fixture):
    for obj in request.getfixturevalue(fixture):
        if obj["apiVersion"].startswith(("monitoring.coreos.com", "apiextensions.k8s.io")):
            continue  # not in the core OpenAPI models; the CRD is checked against crds/ below
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def rendered_config(objects: list[dict]) -> dict:
    [configmap] = [obj for obj in by_kind(objects, "ConfigMap") if obj["metadata"]["name"].endswith("-config")]
    return yaml.safe_load(configmap["data"]["operator.yaml"])


def test_default_deployment_is_one_hardened_recreated_operator(default_objects):
    deployment = one(default_objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = operator_container(default_objects)
    assert container["command"] == ["longctx", "operator"]
    # Everything the operator needs is in its configuration file; flags would be a second home.
    assert container["args"] == ["--config=/etc/longctx/operator.yaml"]
    assert "LONGCTX_OPERATOR_CONFIG" not in {item["name"] for item in container["env"]}
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"health": 8080, "metrics": 8000}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["resources"]["requests"].keys() == {"cpu", "memory"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True and security["allowPrivilegeEscalation"] is False
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["image"] == "ghcr.io/longctx/longctx-operator:0.1.0"


def test_operator_config_carries_trainer_image_scope_and_ports(default_objects, custom_objects):
    default = rendered_config(default_objects)
    assert default["trainerImage"] == "ghcr.io/longctx/longctx-trainer:0.1.0"
    assert default["readNodes"] is True and default["watchNamespaces"] == []
    assert default["healthPort"] == 8080 and default["metricsPort"] == 8000
    # Job authors get no pod annotations and no metrics URL unless the administrator allows them.
    assert default["allowedPodAnnotations"] == [] and default["metricsUrlPrefixes"] == []
    # ... nor any priority class or toleration; CPU jobs get the operator's own cpu and memory.
    assert default["allowedPriorityClasses"] == [] and default["allowedTolerations"] == []
    defaults = OperatorConfig()
    assert (default["cpuJobCpu"], default["cpuJobMemory"]) == (defaults.cpu_job_cpu, defaults.cpu_job_memory)
    # Admission and fabric defaults come from the CRD (server-side), not from the operator's config.
    assert not {"admission", "network"} & default.keys()
    custom = rendered_config(custom_objects)
    assert custom["trainerImage"] == "registry.example.com/ml/longctx-trainer:0.1.0-cuda13"
    assert custom["readNodes"] is False and custom["watchNamespaces"] == ["ml-a", "ml-b"]
    assert custom["healthPort"] == 18080 and custom["metricsPort"] == 18000
    assert default["readKueueWorkloads"] is False and custom["readKueueWorkloads"] is True
    assert default["admissionModes"] == ["builtin", "kueue", "none"] and custom["admissionModes"] == ["kueue"]
    assert not {"forceAdmission", "defaultKueueQueue"} & default.keys()  # unset: the job's choice
    assert (custom["forceAdmission"], custom["defaultKueueQueue"]) == ("kueue", "shared")
    container = operator_container(custom_objects)
    assert {port["containerPort"] for port in container["ports"]} == {18080, 18000}


@pytest.mark.parametrize("fixture", ["default_objects", "custom_objects"])
def test_operator_reads_the_rendered_config_through_its_own_flags(request, tmp_path, fixture):
    """The chart's command line, parsed by the operator's own parser, loads the rendered file into
    the OperatorConfig the handlers get (an unknown or misspelt key would fail here)."""
    from longctx_operator.cli import _config, build_parser
    from longctx_operator.main import config_from

    objects = request.getfixturevalue(fixture)
    path = tmp_path / "operator.yaml"
    rendered = rendered_config(objects)
    path.write_text(yaml.safe_dump(rendered))
    container = operator_container(objects)
    args = build_parser().parse_args(container["command"][1:] + [f"--config={path}"])
    config = config_from(args, _config(args.config))
    assert config.trainer_image == rendered["trainerImage"]
    assert config.trainer_image_pull_policy == rendered["trainerImagePullPolicy"]
    assert config.watch_namespaces == rendered["watchNamespaces"]
    assert config.read_nodes == rendered["readNodes"] and config.trainer_user == rendered["trainerUser"]
    assert config.read_kueue_workloads == rendered["readKueueWorkloads"]
    assert config.admission_modes == rendered["admissionModes"]
    assert config.force_admission == rendered.get("forceAdmission")
    assert config.default_kueue_queue == rendered.get("defaultKueueQueue")
    assert (config.health_port, config.metrics_port) == (rendered["healthPort"], rendered["metricsPort"])
    assert config.excluded_namespaces == rendered["excludedNamespaces"]
    assert config.cluster_domain == rendered["clusterDomain"]
    assert config.network_allow_list.model_dump(by_alias=True) == rendered["networkAllowList"]
    if fixture == "custom_objects":
        assert config.tcpxo_daemon_image == "registry.example.com/gcp/tcpgpudmarxd:v1.0.99"
    else:
        assert "tcpxoDaemonImage" not in rendered  # the operator keeps its built-in default


def test_cluster_scope_grants_the_rule_file_and_nothing_more(default_objects):
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    role = one(default_objects, "ClusterRole")
    # No Kueue rights unless readKueueWorkloads is on (NON_DEFAULT_VALUES turns it on).
    assert role["rules"] == rules["namespaced"] + rules["clusterScoped"]
    binding = one(default_objects, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "longctx", "namespace": "longctx-system"}]
    assert not by_kind(default_objects, "Role")


def test_network_policy_value_turns_on_the_gang_fence_and_its_rights(helm, tmp_path, default_objects):
    """Off by default (no NetworkPolicy rights); on, the operator fences each gang and admits its own
    pod and the configured Prometheus to the metrics ports."""
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    assert rendered_config(default_objects)["gangNetworkPolicy"]["enabled"] is False
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prom"}}}
    objects = render(helm, tmp_path, {"networkPolicy": {"enabled": True, "prometheus": [prometheus]}})
    fence = rendered_config(objects)["gangNetworkPolicy"]
    operator_pod = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert fence["enabled"] is True
    [own, prom] = fence["metricsReaders"]
    assert own["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "longctx-system"}}
    assert own["podSelector"]["matchLabels"].items() <= operator_pod.items() and prom == prometheus
    assert one(objects, "ClusterRole")["rules"] == rules["namespaced"] + rules["networkPolicy"] + rules["clusterScoped"]


def test_chart_defaults_for_the_operator_are_the_operators_own(default_objects):
    """The security-relevant defaults the chart writes into operator.yaml are the code's defaults
    (operator/config.py): one policy whether the operator runs from the chart or by hand."""
    from longctx_operator.config import OperatorConfig

    defaults = OperatorConfig().model_dump(by_alias=True, mode="json")
    config = rendered_config(default_objects)
    for key in ("excludedNamespaces", "clusterDomain", "networkAllowList"):
        assert config[key] == defaults[key], key


def test_excluded_namespaces_get_no_rights_in_any_mode(helm, tmp_path, default_objects):
    """Watching every namespace, one ClusterRole grants them all (RBAC cannot subtract): an admission
    policy refuses the operator's own writes in the excluded namespaces. Listing one of them to
    watch is refused; listed namespaces need no policy (their Roles are the only grants)."""
    [policy] = by_kind(default_objects, "ValidatingAdmissionPolicy")
    [binding] = by_kind(default_objects, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    [selector] = spec["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert selector == {
        "key": "kubernetes.io/metadata.name",
        "operator": "In",
        "values": ["kube-system", "kube-public", "kube-node-lease"],
    }
    [rule] = spec["matchConstraints"]["resourceRules"]
    assert set(rule["operations"]) >= {"CREATE", "UPDATE", "DELETE"} and "*/*" in rule["resources"]
    [condition] = spec["matchConditions"]
    assert condition["expression"] == "request.userInfo.username == 'system:serviceaccount:longctx-system:longctx'"
    assert [v["expression"] for v in spec["validations"]] == ["false"]
    listed = render(helm, tmp_path, {"watchNamespaces": ["ml-a"]})
    assert not by_kind(listed, "ValidatingAdmissionPolicy")
    assert not by_kind(render(helm, tmp_path, {"excludedNamespaces": []}), "ValidatingAdmissionPolicy")
    for values in ({"watchNamespaces": ["ml-a", "kube-system"]}, {"rbac": {"scope": "namespace"}}):
        result = run_helm(
            helm,
            "template",
            "longctx",
            str(CHART),
            "--namespace",
            "kube-system",
            "--kube-version",
            KUBERNETES_VERSION,
            values=values,
            tmp_path=tmp_path,
        )
        assert result.returncode != 0 and "watchNamespaces: kube-system is in excludedNamespaces" in result.stderr


def test_cluster_scope_with_listed_namespaces_grants_writes_only_there(helm, tmp_path):
    """Watching some namespaces in cluster scope: the namespaced rights (creating Jobs, patching
    ConfigMaps) are Roles in those namespaces; the ClusterRole holds the node reads alone."""
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    objects = render(helm, tmp_path, {"watchNamespaces": ["ml-a", "ml-b"]})
    assert one(objects, "ClusterRole")["rules"] == rules["clusterScoped"]
    roles = by_kind(objects, "Role")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["ml-a", "ml-b"]
    assert all(role["rules"] == rules["namespaced"] for role in roles)
    assert rendered_config(objects)["readNodes"] is True


def test_namespace_scope_has_a_role_per_namespace_without_node_access(custom_objects):
    assert not by_kind(custom_objects, "ClusterRole") and not by_kind(custom_objects, "ClusterRoleBinding")
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    roles = by_kind(custom_objects, "Role")
    assert sorted(role["metadata"]["namespace"] for role in roles) == ["ml-a", "ml-b"]
    for role in roles:
        assert all("nodes" not in rule["resources"] for rule in role["rules"])
        assert role["rules"] == rules["namespaced"] + rules["kueue"]  # readKueueWorkloads is on
    bindings = by_kind(custom_objects, "RoleBinding")
    assert {binding["subjects"][0]["name"] for binding in bindings} == {"longctx-op"}


def test_rbac_never_touches_secrets_or_uses_wildcards():
    rules = yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text())
    for rule in rules["namespaced"] + rules["kueue"] + rules["networkPolicy"] + rules["clusterScoped"]:
        assert "secrets" not in rule["resources"]
        assert "*" not in rule["resources"] + rule["verbs"] + rule["apiGroups"]


def test_monitoring_objects_need_the_api_and_the_values(helm, tmp_path, default_objects, custom_objects):
    kinds = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not kinds & {obj["kind"] for obj in default_objects}, "rendered without monitoring.coreos.com/v1"
    assert kinds <= {obj["kind"] for obj in custom_objects}
    disabled = {"metrics": {key: {"enabled": False} for key in ("serviceMonitor", "podMonitor", "prometheusRule")}}
    objects = render(helm, tmp_path, disabled, api_versions=[MONITORING])
    assert not kinds & {obj["kind"] for obj in objects}


def test_monitors_select_the_operator_and_the_trainer_pods(custom_objects):
    service = one(custom_objects, "Service")
    monitor = one(custom_objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics" and monitor["spec"]["endpoints"][0]["honorLabels"]
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus"
    pods = one(custom_objects, "PodMonitor")["spec"]
    assert pods["selector"]["matchExpressions"] == [{"key": "longctx.io/job-name", "operator": "Exists"}]
    [endpoint] = pods["podMetricsEndpoints"]
    assert "port" not in endpoint  # every declared port is a candidate; the relabeling keeps metrics ports
    [keep] = endpoint["relabelings"]
    assert keep == {
        "sourceLabels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": "metrics(-[0-9]+)?",
        "action": "keep",
    }
    assert pods["namespaceSelector"] == {"matchNames": ["ml-a", "ml-b"]}
    # Trainer images are the authors': bounded scrapes, and only the trainer contract's series kept.
    assert (pods["sampleLimit"], pods["labelLimit"]) == (10000, 30)
    assert (pods["labelNameLengthLimit"], pods["labelValueLengthLimit"]) == (128, 1024)
    assert endpoint["metricRelabelings"] == [{"sourceLabels": ["__name__"], "regex": "longctx_.*", "action": "keep"}]


@pytest.mark.parametrize("example", ["quickstart.yaml", "llama3-8b-128k-infiniband-nvshmem.yaml"])
def test_pod_monitor_selects_the_trainer_pods_longctx_renders(custom_objects, example):
    rendered = subprocess.run(
        [str(Path(sys.executable).parent / "longctx"), "render", str(ROOT / "examples" / example)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    template = one([doc for doc in yaml.safe_load_all(rendered) if doc], "Job")["spec"]["template"]
    selector = one(custom_objects, "PodMonitor")["spec"]["selector"]
    for expression in selector["matchExpressions"]:
        assert expression["operator"] == "Exists" and expression["key"] in template["metadata"]["labels"]
    [trainer] = [c for c in template["spec"]["containers"] if c["name"] == "trainer"]
    [keep] = one(custom_objects, "PodMonitor")["spec"]["podMetricsEndpoints"][0]["relabelings"]
    kept = {port["name"] for port in trainer["ports"] if re.fullmatch(keep["regex"], port["name"])}
    processes = int(next(e["value"] for e in trainer["env"] if e["name"] == "LONGCTX_PROCESSES_PER_POD"))
    assert len(kept) == processes and "metrics" in kept and "coordinator" not in kept


def test_chart_embeds_the_dashboard_and_the_alert_rules(custom_objects):
    [dashboard] = [
        obj for obj in by_kind(custom_objects, "ConfigMap") if obj["metadata"]["name"].endswith("-dashboard")
    ]
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert json.loads(dashboard["data"]["longctx.json"]) == json.loads(
        (ROOT / "dashboards" / "longctx.json").read_text()
    )
    rules = one(custom_objects, "PrometheusRule")["spec"]
    assert rules == yaml.safe_load((ROOT / "alerts" / "longctx.rules.yaml").read_text())


def test_chart_crd_is_the_generated_crd(default_objects):
    generated = ROOT / "crds" / "longctx.io_longcontextjobs.yaml"
    chart_copy = CHART / "crds" / generated.name
    assert chart_copy.read_bytes() == generated.read_bytes(), f"{chart_copy} is stale: run hack/generate"
    assert one(default_objects, "CustomResourceDefinition") == yaml.safe_load(generated.read_text())


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"rbac": {"scope": "everything"}}, ["/rbac/scope", "cluster", "namespace"]),
        ({"defaults": {"admission": "kueue"}}, ["/defaults", "admission"]),
        ({"image": {"repository": ""}}, ["/image/repository"]),
        ({"operator": {"metricsPort": 70000}}, ["/operator/metricsPort", "maximum"]),
        ({"metrics": {"podMonitor": {"interval": "fast"}}}, ["/metrics/podMonitor/interval"]),
        ({"watchNamespaces": ["Not_A_Namespace"]}, ["/watchNamespaces/0"]),
        ({"podSecurityContext": {"runAsNonRoot": False}}, ["/podSecurityContext/runAsNonRoot"]),
        ({"replicas": 2}, ["replicas"]),
        ({"operator": {"admissionModes": ["sometimes"]}}, ["/operator/admissionModes/0"]),
        ({"operator": {"forceAdmission": "skip"}}, ["/operator/forceAdmission"]),
        (
            {"operator": {"networkAllowList": {"default": {"fabrics": ["carrier-pigeon"]}}}},
            ["/operator/networkAllowList/default/fabrics/0"],
        ),
        ({"metrics": {"podMonitor": {"sampleLimit": 0}}}, ["/metrics/podMonitor/sampleLimit"]),
        ({"excludedNamespaces": ["Kube_System"]}, ["/excludedNamespaces/0"]),
        ({"operator": {"clusterDomain": "cluster.local;x"}}, ["/operator/clusterDomain"]),
    ],
    ids=[
        "scope",
        "removed-admission-default",
        "repository",
        "port",
        "interval",
        "namespace",
        "root",
        "unknown-key",
        "admission-mode",
        "force-admission",
        "fabric",
        "sample-limit",
        "excluded-namespace",
        "cluster-domain",
    ],
)
def test_schema_rejects_bad_values_naming_the_field(helm, tmp_path, overrides, expected):
    result = run_helm(
        helm,
        "template",
        "longctx",
        str(CHART),
        "--kube-version",
        KUBERNETES_VERSION,
        values=overrides,
        tmp_path=tmp_path,
    )
    assert result.returncode != 0, f"accepted {overrides}"
    assert "values don't meet the specifications of the schema" in result.stderr, result.stderr
    for text in expected:
        assert text in result.stderr, result.stderr


def test_namespace_scope_installs_and_says_nodes_are_not_readable(helm, tmp_path):
    """Namespace scope alone renders (no chart-wide admission default to force); the operator's
    config turns node access off and NOTES tell which admission jobs must use instead."""
    values = {"rbac": {"scope": "namespace"}}
    objects = render(helm, tmp_path, values)
    config = rendered_config(objects)
    assert config["readNodes"] is False and config["watchNamespaces"] == ["longctx-system"]
    notes = " ".join(render_notes(helm, tmp_path / "notes", values).split())
    assert "cannot read nodes (readNodes: false)" in notes
    assert "spec.scheduling.admission to kueue" in notes and "or none" in notes
    assert f"stays Pending with reason {reasons.NODES_NOT_READABLE}" in notes


def render_notes(helm: str, tmp_path: Path, values: dict | None = None, api_versions=()) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` skips NOTES.txt, so a copy of the
    chart turns it into a named template and renders that into a ConfigMap."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    notes = chart / "templates" / "NOTES.txt"
    (chart / "templates" / "_notes.tpl").write_text('{{- define "test.notes" -}}' + notes.read_text() + "{{- end -}}")
    notes.unlink()
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\ndata:\n"
        '  notes: {{ include "test.notes" . | quote }}\n'
    )
    objects = render(helm, tmp_path, values, api_versions, extra=["--show-only", "templates/notes.yaml"], chart=chart)
    return one(objects, "ConfigMap")["data"]["notes"]


def test_notes_explain_scope_and_monitoring(helm, tmp_path):
    default = render_notes(helm, tmp_path / "default")
    assert "watches all namespaces" in default and "does not serve monitoring.coreos.com/v1" in default
    custom = render_notes(helm, tmp_path / "custom", NON_DEFAULT_VALUES, [MONITORING])
    assert "namespace(s) ml-a, ml-b" in custom and "cannot read nodes" in custom
    assert "PodMonitor longctx-trainers" in custom and "LongctxJobStalled" in custom
    assert "registry.example.com/ml/longctx-trainer:0.1.0-cuda13" in custom


@pytest.fixture(scope="module")
def monitoring_schemas(tmp_path_factory) -> dict[str, dict]:
    """openAPIV3Schema of each monitoring.coreos.com/v1 kind, from the Prometheus Operator's Go
    module (its example/prometheus-operator-crd), fetched through the Go module proxy once."""
    env = {**os.environ, "GOSUMDB": "off", "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    download = subprocess.run(
        ["go", "mod", "download", "-json", PROMETHEUS_OPERATOR],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path_factory.mktemp("go"),
    )
    folder = Path(json.loads(download.stdout)["Dir"]) / "example" / "prometheus-operator-crd"
    schemas = {}
    for plural in ("servicemonitors", "podmonitors", "prometheusrules"):
        crd = yaml.safe_load((folder / f"monitoring.coreos.com_{plural}.yaml").read_text())
        [v1] = [version for version in crd["spec"]["versions"] if version["name"] == "v1"]
        schemas[crd["spec"]["names"]["kind"]] = v1["schema"]["openAPIV3Schema"]
    return schemas


def unknown_fields(value, schema: dict, path: str = "") -> list[str]:
    """Fields the API server would silently prune: keys a structural schema does not declare."""
    if isinstance(value, dict) and "properties" in schema and not schema.get("x-kubernetes-preserve-unknown-fields"):
        return [
            problem
            for key, item in value.items()
            for problem in (
                [f"{path}.{key}"]
                if key not in schema["properties"]
                else unknown_fields(item, schema["properties"][key], f"{path}.{key}")
            )
        ]
    if isinstance(value, list) and "items" in schema:
        return [
            problem
            for index, item in enumerate(value)
            for problem in unknown_fields(item, schema["items"], f"{path}[{index}]")
        ]
    return []


def test_monitors_and_rules_match_the_prometheus_operator_crds(custom_objects, monitoring_schemas):
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        obj = one(custom_objects, kind)
        # No metaschema check: the CRDs carry Go regexes such as ^(?i)... that Python rejects.
        jsonschema.Draft7Validator(monitoring_schemas[kind]).validate(obj)
        assert not unknown_fields(obj, monitoring_schemas[kind]), kind


def test_unknown_field_check_catches_a_misplaced_field(custom_objects, monitoring_schemas):
    monitor = json.loads(json.dumps(one(custom_objects, "ServiceMonitor")))
    monitor["spec"]["honorLabels"] = True  # belongs to an endpoint, not to the spec
    assert unknown_fields(monitor, monitoring_schemas["ServiceMonitor"]) == [".spec.honorLabels"]
