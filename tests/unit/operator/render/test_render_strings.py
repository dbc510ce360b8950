"""Every string a job author writes either is refused with its field named or arrives verbatim
where it is used: it can never change the structure of what is rendered (docs/security.md).

For each string field, a job is rendered once with a marker value and then with generated values
(pattern-shaped ones and hostile text: YAML line breaks \\n \\r U+0085 U+2028, indicators, tags,
anchors, document markers). An accepted value must render exactly the marker's objects with the
marker replaced by the value (in keys and in strings, the trainer config compared as data), the
YAML `longctx render` prints must load back to the same objects, and every object must be valid
Kubernetes.
"""

from __future__ import annotations

import copy
import posixpath
import re
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from longctx_operator.api import parse_job, problems
from longctx_operator.api import spec as api
from longctx_operator.layout import ResolvedLayout
from longctx_operator.names import RESERVED_MOUNTS
from longctx_operator.render import render_workload, render_yaml
from support.jobs import job_manifest

K8S_VERSION = "1.36"
MARKER = "zq7marker"
BASE = job_manifest(namespace="team", layout=(1, 2, 1), resources=(1, 2, "h100-80gb"), network={"fabric": "tcp"})
LAYOUT = ResolvedLayout(data=1, context=2, tensor=1, processes_per_node=1)

# Text that YAML (or a template) would read as structure: every line break YAML knows, indicators,
# tags, anchors, flow collections, document markers, and key-looking text.
HOSTILE = st.lists(
    st.sampled_from(
        list("\n\r\x85\u2028\u2029\t :#&*!|>'\"%@`{}[],-?.~/\\=$aZ0_ÿ€")
        + [
            "---",
            "...",
            "privileged: true",
            "kind: Job",
            "!!binary",
            "&a",
            "*a",
            "<<",
            "true",
            "0x1F",
            "1e3",
            "null",
            "\U0001f600",
            "\U00010348",
        ]
    ),
    min_size=1,
    max_size=12,
).map("".join)
PAYLOADS = st.sampled_from(
    [
        "x\n      securityContext: {privileged: true}",
        "x\r  hostPID: true",
        "x\x85hostNetwork: true",
        "x\u2028serviceAccountName: admin",
        "true",
        "123",
        "[a, b]",
        "!!binary aGVsbG8=",
        "&a x",
        "x #y",
        "---\nkind: ClusterRoleBinding",
        "'",
        '"',
        "{a: 1}",
        "null",
        "~",
        "- a",
        "? x",
        "%TAG ! x",
        "",
    ]
)


def _regex(pattern: str) -> st.SearchStrategy[str]:
    return st.from_regex(pattern, fullmatch=True)


def _set(path: str) -> Callable[[dict, str], None]:
    def apply(doc: dict, value: str) -> None:
        *parents, leaf = path.split(".")
        for name in parents:
            doc = doc.setdefault(name, {})
        doc[leaf] = value

    return apply


def _set_key(path: str, value_of_key: str) -> Callable[[dict, str], None]:
    def apply(doc: dict, key: str) -> None:
        _set(path)(doc, {key: value_of_key})

    return apply


def _env_value(doc: dict, value: str) -> None:
    doc["spec"]["env"] = [{"name": "USER_SETTING", "value": value}]


def _toleration(field: str) -> Callable[[dict, str], None]:
    def apply(doc: dict, value: str) -> None:
        toleration = {"key": "example.com/pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
        toleration[field] = value
        doc["spec"]["scheduling"] = {"tolerations": [toleration]}

    return apply


def _with(extra: dict, apply: Callable[[dict, str], None]) -> Callable[[dict, str], None]:
    def both(doc: dict, value: str) -> None:
        for dotted, setting in extra.items():
            _set(dotted)(doc, copy.deepcopy(setting))
        apply(doc, value)

    return both


# (field, how to set it, marker value, generated values)
FIELDS: list[tuple[str, Callable[[dict, str], None], str, st.SearchStrategy[str]]] = [
    ("spec.image", _set("spec.image"), f"registry.example.com/{MARKER}:1", _regex(api.IMAGE_PATTERN)),
    (
        "spec.scheduling.priorityClassName",
        _set("spec.scheduling.priorityClassName"),
        MARKER,
        _regex(api.DNS_SUBDOMAIN_PATTERN),
    ),
    (
        "spec.scheduling.queueName",
        _with({"spec.scheduling.admission": "kueue"}, _set("spec.scheduling.queueName")),
        MARKER,
        _regex(api.LABEL_VALUE_PATTERN),
    ),
    (
        "spec.scheduling.nodeSelector",
        _set_key("spec.scheduling.nodeSelector", "a"),
        f"example.com/{MARKER}",
        _regex(api.QUALIFIED_NAME_PATTERN),
    ),
    (
        "spec.scheduling.nodeSelector",
        lambda doc, v: _set("spec.scheduling.nodeSelector")(doc, {"pool": v}),
        MARKER,
        _regex(api.LABEL_VALUE_PATTERN),
    ),
    (
        "spec.scheduling.tolerations[0].key",
        _toleration("key"),
        f"example.com/{MARKER}",
        _regex(api.QUALIFIED_NAME_PATTERN),
    ),
    ("spec.scheduling.tolerations[0].value", _toleration("value"), MARKER, _regex(api.LABEL_VALUE_PATTERN)),
    ("spec.env", _env_value, MARKER, st.text(max_size=60)),
    (
        "spec.data.path",
        _with({"spec.data.kind": "text"}, _set("spec.data.path")),
        f"/data/{MARKER}",
        _regex(api.PATH_PATTERN),
    ),
    (
        "spec.checkpoint.path",
        _with({"spec.checkpoint.persistentVolumeClaim": "ckpt"}, _set("spec.checkpoint.path")),
        f"/{MARKER}",
        _regex(api.PATH_PATTERN),
    ),
    (
        "spec.checkpoint.persistentVolumeClaim",
        _set("spec.checkpoint.persistentVolumeClaim"),
        MARKER,
        _regex(api.DNS_SUBDOMAIN_PATTERN),
    ),
    (
        "spec.initFrom.path",
        _with({"spec.initFrom.persistentVolumeClaim": "weights"}, _set("spec.initFrom.path")),
        f"/{MARKER}",
        _regex(api.PATH_PATTERN),
    ),
    ("spec.network.socketInterface", _set("spec.network.socketInterface"), MARKER, _regex(r"^[A-Za-z0-9_.:^=-]+$")),
    (
        "spec.scheduling.workloadPriorityClassName",
        _with(
            {"spec.scheduling.admission": "kueue", "spec.scheduling.queueName": "q"},
            _set("spec.scheduling.workloadPriorityClassName"),
        ),
        MARKER,
        _regex(api.DNS_SUBDOMAIN_PATTERN),
    ),
    (
        "spec.network.rdmaResource",
        _with({"spec.network.fabric": "infiniband"}, _set("spec.network.rdmaResource")),
        f"example.com/{MARKER}",
        _regex(r"^[a-z0-9.-]+/[A-Za-z0-9_.-]+$"),  # looser than the API: what it used to accept
    ),
    (
        "spec.trainer.args",
        lambda doc, v: _set("spec.trainer")(
            doc, {"framework": "pytorch", "command": ["torchrun"], "args": ["train.py", v]}
        ),
        MARKER,
        st.text(max_size=60),
    ),
    (
        "spec.trainer.command",
        lambda doc, v: _set("spec.trainer")(doc, {"command": ["python", v]}),
        MARKER,
        st.text(max_size=60),
    ),
]


def _job_with(apply: Callable[[dict, str], None], value: str) -> dict:
    doc = copy.deepcopy(BASE)
    apply(doc, value)
    return doc


def _as_data(objects: list[dict]) -> list[dict]:
    """The objects with the trainer config (a YAML string in the ConfigMap) parsed, so that it is
    compared as data, not as text whose quoting depends on the value."""
    out = copy.deepcopy(objects)
    for obj in out:
        if obj["kind"] == "ConfigMap":
            obj["data"] = {key: yaml.safe_load(text) for key, text in obj["data"].items()}
    return out


def _replace(node: Any, old: str, new: str) -> Any:
    if isinstance(node, dict):
        return {_replace(k, old, new): _replace(v, old, new) for k, v in node.items()}
    if isinstance(node, list):
        return [_replace(item, old, new) for item in node]
    return node.replace(old, new) if isinstance(node, str) else node


def _rendered(manifest: dict) -> list[dict]:
    return render_workload(parse_job(manifest), LAYOUT, 1).objects


def _contains(node: Any, value: str) -> bool:
    if isinstance(node, dict):
        return any(_contains(k, value) or _contains(v, value) for k, v in node.items())
    if isinstance(node, list):
        return any(_contains(item, value) for item in node)
    return node == value or (isinstance(node, str) and value in node)


@pytest.mark.parametrize("field, apply, marker, values", FIELDS, ids=[f[0] + f"#{i}" for i, f in enumerate(FIELDS)])
def test_user_strings_render_verbatim_or_are_refused(field, apply, marker, values):
    marked = _job_with(apply, marker)
    assert not problems(marked), problems(marked)
    expected_shape = _as_data(_rendered(marked))
    assert _contains(expected_shape, marker), f"{field} is not rendered anywhere"

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(value=st.one_of(values, HOSTILE, PAYLOADS))
    def check(value: str) -> None:
        manifest = _job_with(apply, value)
        found = problems(manifest)
        if found:
            assert any(p.field.startswith(field.split("[")[0].rsplit(".", 1)[0]) for p in found), found
            return
        objects = _rendered(manifest)
        assert _as_data(objects) == _replace(expected_shape, marker, value)
        assert [doc for doc in yaml.safe_load_all(render_yaml(objects)) if doc] == objects
        for obj in objects:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        assert not kubernetes_refuses(objects)

    check()


def test_marker_does_not_occur_in_a_plain_rendering():
    """The marker replacement above is exact only if the marker appears nowhere by itself."""
    assert not _contains(_as_data(_rendered(BASE)), MARKER)


@pytest.mark.parametrize(
    "value",
    [
        "\x85",
        "a\x85b",
        "x\r\ny",
        "\u2028",
        "a\u2029b",
        "line\nand\x85",
        "\U0001f600 outside the Basic Multilingual Plane",
    ],
)
def test_every_line_break_survives_the_printed_yaml(value):
    """PyYAML alone folds a NEL inside single quotes into a space; `longctx render` must not."""
    objects = _rendered(_job_with(_env_value, value))
    text = render_yaml(objects)
    assert [doc for doc in yaml.safe_load_all(text) if doc] == objects
    assert "\\ud83d" not in text  # an astral character is itself, never a surrogate escape kubectl refuses


# Kubernetes' own checks beyond the OpenAPI schema that kubernetes_validate knows (labels,
# tolerations, resource names, ports: pkg/apis/core/validation and apimachinery's validation),
# written here independently of operator/api/rules.py, so that the two can be compared.
_K8S_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_K8S_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_NATIVE_RESOURCES = {"cpu", "memory", "ephemeral-storage"}


def _qualified_name(text: str) -> bool:
    prefix, _, name = text.rpartition("/")
    if "/" in text and (not prefix or len(prefix) > 253 or not re.fullmatch(_K8S_SUBDOMAIN, prefix)):
        return False
    return 0 < len(name) <= 63 and re.fullmatch(_K8S_NAME, name) is not None


def _label_value(text: str) -> bool:
    return text == "" or (len(text) <= 63 and re.fullmatch(_K8S_NAME, text) is not None)


def _extended_resource(name: str) -> bool:
    native = "/" not in name or "kubernetes.io/" in name
    return not native and not name.startswith("requests.") and _qualified_name("requests." + name)


def _toleration_refused(t: dict) -> str | None:
    key, operator, value = t.get("key", ""), t.get("operator", "Equal"), t.get("value", "")
    if key and not _qualified_name(key):
        return "key"
    if not key and operator != "Exists":
        return "operator must be Exists when key is empty"
    if "tolerationSeconds" in t and t.get("effect") != "NoExecute":
        return "tolerationSeconds needs effect NoExecute"
    if operator == "Equal" and not _label_value(value):
        return "value"
    if operator == "Exists" and value:
        return "value must be empty when operator is Exists"
    return None


def kubernetes_refuses(objects: list[dict]) -> list[str]:
    """Why Kubernetes would refuse one of the rendered objects; empty when it accepts them all."""
    found = []
    for obj in objects:
        metas = [obj["metadata"]] + ([obj["spec"]["template"]["metadata"]] if obj["kind"] == "Job" else [])
        for meta in metas:
            for key, value in (meta.get("labels") or {}).items():
                if not (_qualified_name(key) and _label_value(value)):
                    found.append(f"{obj['kind']} label {key}={value}")
        if obj["kind"] == "Service":
            ports = [(p["port"], p.get("protocol", "TCP")) for p in obj["spec"]["ports"]]
            if len(set(ports)) != len(ports):
                found.append(f"Service ports {ports} repeat")
        if obj["kind"] == "Job":
            pod = obj["spec"]["template"]["spec"]
            found += [f"toleration {t}: {why}" for t in pod.get("tolerations", []) if (why := _toleration_refused(t))]
            for container in pod["containers"]:
                names = {**container.get("resources", {}).get("limits", {})}
                found += [f"resource {n}" for n in names if n not in _NATIVE_RESOURCES and not _extended_resource(n)]
                numbers = [p["containerPort"] for p in container.get("ports", [])]
                if len(set(numbers)) != len(numbers):
                    found.append(f"container ports {numbers} repeat")
    return found


def _tolerations(doc: dict, tolerations: list[dict]) -> None:
    doc["spec"]["scheduling"] = {"tolerations": tolerations}


TOLERATION = st.fixed_dictionaries(
    {},
    optional={
        "key": st.sampled_from(["example.com/pool", "pool", "", "node-role.kubernetes.io/control-plane"]),
        "operator": st.sampled_from(["Exists", "Equal"]),
        "value": st.sampled_from(["", "a", "x.y_z"]),
        "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]),
        "tolerationSeconds": st.sampled_from([-1, 0, 60]),
    },
)


@settings(max_examples=300, deadline=None)
@given(tolerations=st.lists(TOLERATION, max_size=3))
def test_accepted_tolerations_are_ones_kubernetes_accepts_and_name_a_key(tolerations):
    manifest = _job_with(_tolerations, tolerations)
    if problems(manifest):
        return
    rendered = _rendered(manifest)[2]["spec"]["template"]["spec"]["tolerations"]
    assert not kubernetes_refuses(_rendered(manifest))
    assert all(t.get("key") for t in rendered)  # a key-less Exists would tolerate every taint


@settings(max_examples=300, deadline=None)
@given(
    metrics=st.integers(1024, 65000),
    offset=st.integers(-3, 9),
    processes=st.sampled_from([None, 1, 2, 4, 8]),
    nvshmem=st.booleans(),
)
def test_accepted_ports_never_collide(metrics, offset, processes, nvshmem):
    def apply(doc: dict, _: str) -> None:
        doc["spec"]["resources"]["gpusPerNode"] = 8
        doc["spec"]["parallelism"] = {"mode": "manual", "data": 1, "context": 8, "tensor": 1}
        if processes is not None:
            doc["spec"]["parallelism"]["processesPerNode"] = processes
        if nvshmem:
            doc["spec"]["communication"] = {"collectivePermute": "nvshmem"}
        doc["spec"]["metrics"] = {"port": metrics}
        doc["spec"]["network"]["coordinatorPort"] = min(max(metrics + offset, 1024), 65535)

    manifest = _job_with(apply, "")
    if problems(manifest):
        return
    job = parse_job(manifest)
    layout = ResolvedLayout(data=1, context=8, tensor=1, processes_per_node=job.spec.processes_per_node())
    assert not kubernetes_refuses(render_workload(job, layout, 1).objects)


SEGMENTS = st.sampled_from(["a", "b", ".", "..", "", "etc", "longctx", "dev", "shm", "checkpoints"])
PATHS = st.lists(SEGMENTS, min_size=1, max_size=5).map(lambda parts: "/" + "/".join(parts))


def _inside(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


@settings(max_examples=400, deadline=None)
@given(checkpoint=PATHS, weights=PATHS, checkpoint_claim=st.booleans())
def test_accepted_claim_mounts_are_where_their_text_says(checkpoint, weights, checkpoint_claim):
    """Compared after normalising ('.', '..', '//', a trailing '/'), as the kubelet resolves a
    mount path: an accepted claim is never on or under the operator's mounts, and the weights and
    the checkpoint directory are never one inside the other."""

    def apply(doc: dict, _: str) -> None:
        doc["spec"]["checkpoint"] = {"path": checkpoint} | (
            {"persistentVolumeClaim": "ckpt"} if checkpoint_claim else {}
        )
        doc["spec"]["initFrom"] = {"path": weights, "persistentVolumeClaim": "weights"}

    if problems(_job_with(apply, "")):
        return
    real = [posixpath.normpath(checkpoint), posixpath.normpath(weights)]
    mounted = real if checkpoint_claim else real[1:]
    assert not any(_inside(path, mount) for path in mounted for mount in RESERVED_MOUNTS), real
    assert not (_inside(real[0], real[1]) or _inside(real[1], real[0])), real
    assert "/" not in mounted
