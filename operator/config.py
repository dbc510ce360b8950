"""The operator's configuration: one typed object, loaded once at start-up and passed in.

The Helm chart writes it as operator.yaml (camelCase keys, the same names as here: an unknown key
is an error, so the chart and the code cannot drift apart); `longctx operator --config FILE`
reads it, and command-line flags override single values. Nothing is read from the environment.
"""

from __future__ import annotations

import fnmatch
import json
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator
from pydantic.alias_generators import to_camel

from .api.spec import (
    DNS_SUBDOMAIN_PATTERN,
    IMAGE_PATTERN,
    LABEL_VALUE_PATTERN,
    QUANTITY_PATTERN,
    FabricName,
    NetworkSpec,
    QualifiedName,
    SchedulingSpec,
)

DEFAULT_TRAINER_IMAGE = "ghcr.io/longctx/longctx-trainer:0.1.0"
Image = Annotated[str, StringConstraints(pattern=IMAGE_PATTERN, max_length=512)]
Namespace = Annotated[str, StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63)]
AdmissionMode = SchedulingSpec.model_fields["admission"].annotation  # builtin | kueue | none
ADMISSION_MODES: list[AdmissionMode] = list(get_args(AdmissionMode))
Quantity = Annotated[str, StringConstraints(pattern=QUANTITY_PATTERN, max_length=32)]
DEFAULT_PORTS = {"http": 80, "https": 443}
# What a metrics URL may hold: printable ASCII without spaces, backslashes, '@' (user info) or '%'
# (escapes), so that this check and the HTTP client cannot read one URL as two different places.
_PLAIN_URL = re.compile(r"^https?://[^@%\\\s\x00-\x1f\x7f-\uffff]+$")
_DOT_SEGMENT = re.compile(r"(^|/)\.\.?(/|$)")
NetworkPattern = Annotated[str, StringConstraints(pattern=r"^[a-z0-9*?.!\[\]-]+$", max_length=63)]
_CONFIG = ConfigDict(
    frozen=True, alias_generator=to_camel, populate_by_name=True, extra="forbid", use_attribute_docstrings=True
)

SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")
PRIVILEGED_FABRICS = ("gcp-tcpx",)
"""Fabrics whose receive-datapath sidecar runs privileged (render/fabrics.py): a namespace gets
them only where the administrator lists them."""
DEFAULT_FABRICS = tuple(f for f in get_args(FabricName) if f not in PRIVILEGED_FABRICS)


class NetworkAllowance(BaseModel):
    """What jobs of a namespace may ask of the network (docs/security.md)."""

    model_config = _CONFIG

    fabrics: list[FabricName] = Field(default_factory=lambda: list(DEFAULT_FABRICS))
    """Fabrics (spec.network.fabric) jobs may use."""
    networks: list[NetworkPattern] = Field(default_factory=list, max_length=256)
    """fnmatch patterns of the names jobs may list in spec.network.networks: Multus
    NetworkAttachmentDefinitions of their namespace (infiniband, roce) or GKE networks, which are
    cluster-scoped (gcp-*); empty: none."""


class NetworkAllowList(BaseModel):
    model_config = _CONFIG

    default: NetworkAllowance = Field(default_factory=NetworkAllowance)
    """The allowance of every namespace that `namespaces` does not list."""
    namespaces: dict[Namespace, NetworkAllowance] = Field(default_factory=dict)
    """Per namespace: its allowance, instead of `default`."""

    def refusal(self, namespace: str, network: NetworkSpec) -> str | None:
        """Why a job in `namespace` may not use `network`, naming the field; None when it may."""
        allowed = self.namespaces.get(namespace, self.default)
        where = f"in namespace {namespace} by the operator's networkAllowList"
        if network.fabric not in allowed.fabrics:
            fabrics = ", ".join(allowed.fabrics) or "none"
            return f"spec.network.fabric: {network.fabric} is not allowed {where} (allowed: {fabrics})"
        for i, name in enumerate(network.networks):
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in allowed.networks):
                return (
                    f"spec.network.networks[{i}]: {json.dumps(name)} is not allowed {where} "
                    f"(allowed: {', '.join(allowed.networks) or 'none'})"
                )
        return None


class GangNetworkPolicy(BaseModel):
    model_config = _CONFIG

    enabled: bool = False
    """Create a NetworkPolicy with each job: its pods accept connections from the gang's own pods
    (any port: the collectives' ports are ephemeral) and, on the metrics ports only, from
    `metricsReaders`; nothing else reaches them (the rendezvous port included)."""
    metrics_readers: list[dict[str, Any]] = Field(default_factory=list)
    """NetworkPolicy peers that may read the metrics ports: the operator's pod and Prometheus (the
    chart fills both in)."""


class OperatorConfig(BaseModel):
    model_config = _CONFIG

    trainer_image: Image = DEFAULT_TRAINER_IMAGE
    """Image of jobs that do not set spec.image."""
    trainer_image_pull_policy: Literal["Always", "IfNotPresent", "Never"] = "IfNotPresent"
    tcpx_daemon_image: Image = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpx/tcpgpudmarxd-dev:v2.0.12"
    """GPUDirect-TCPX receive-datapath daemon (fabric gcp-tcpx)."""
    tcpxo_daemon_image: Image = "us-docker.pkg.dev/gce-ai-infra/gpudirect-tcpxo/tcpgpudmarxd-dev:v1.0.14"
    """GPUDirect-TCPXO receive-datapath daemon (fabric gcp-tcpxo)."""
    trainer_user: int = Field(1000, ge=1, le=2**31 - 1)
    """Non-root uid (and gid, fsGroup) the trainer containers run as; the trainer image's user."""
    watch_namespaces: list[Namespace] = Field(default_factory=list)
    """Namespaces whose LongContextJobs this operator serves; empty: every namespace."""
    excluded_namespaces: list[Namespace] = Field(default_factory=lambda: list(SYSTEM_NAMESPACES))
    """Namespaces whose LongContextJobs this operator never serves, even when it watches every
    namespace (the chart also keeps its write rights out of them: docs/security.md)."""
    cluster_domain: str = Field("cluster.local", max_length=253, pattern=DNS_SUBDOMAIN_PATTERN)
    """The cluster's DNS domain (the kubelets' clusterDomain): ranks meet at rank 0's fully
    qualified name <pod>.<service>.<namespace>.svc.<clusterDomain>."""
    network_allow_list: NetworkAllowList = Field(default_factory=NetworkAllowList)
    """Fabrics and secondary networks jobs may use, per namespace; a job asking for others stays
    Pending with reason NetworkNotAllowed."""
    gang_network_policy: GangNetworkPolicy = Field(default_factory=GangNetworkPolicy)
    """A NetworkPolicy per job that fences its gang's pods (render/workload.py)."""
    read_nodes: bool = True
    """Watch nodes (builtin gang admission counts free GPUs); false where RBAC cannot read them."""
    topology_labels: list[QualifiedName] = Field(default_factory=list, max_length=8)
    """Node label keys, outermost first (a block, a rack, an NVLink domain), by which trainers order
    their rings, between the zone and each job's scheduling.topologyKey (placement.py). With
    readNodes the operator writes a bound pod's node values of these levels onto the pod (annotation
    longctx.io/placement); without it, only labels the cluster copies onto pods count."""
    read_kueue_workloads: bool = False
    """Watch Kueue's Workloads (kueue.x-k8s.io/v1beta2, Kueue 0.15 or later), to show in a queued
    job's status why Kueue has not admitted it and why it evicted one; needs Kueue's CRDs and the
    right to list and watch workloads.kueue.x-k8s.io."""
    workers: int = Field(16, ge=1, le=256)
    """Concurrent decisions (builtin admission counts included); each decision's writes then run in
    a task of the job's own, so a slow API server holds back no other job's decision."""
    progress_interval_seconds: float = Field(10.0, gt=0, le=3600)
    """Seconds between reads of each running job's rank-0 metrics."""
    metrics_port: int = Field(8000, ge=0, le=65535)
    """Port of the operator's own Prometheus metrics; 0: off."""
    health_port: int = Field(8080, ge=0, le=65535)
    """Port of kopf's liveness endpoint /healthz; 0: off."""
    allowed_pod_annotations: list[str] = Field(default_factory=list)
    """Annotation keys (fnmatch patterns, e.g. "example.com/*") that jobs may put on their pods
    through the longctx.io/pod-annotations annotation; empty: none."""
    metrics_url_prefixes: list[str] = Field(default_factory=list)
    """http(s) URL prefixes that a job's longctx.io/metrics-url annotation may point at (for
    clusters where the operator cannot reach pod IPs); empty: the annotation is ignored and rank 0
    is read at its pod IP."""
    # -- Admission policy: how gangs may be admitted (admission.scheduling_for applies it) ----------
    admission_modes: list[AdmissionMode] = Field(default_factory=lambda: list(ADMISSION_MODES), min_length=1)
    """scheduling.admission values jobs may use; a job asking for another is held Pending with
    reason AdmissionNotAllowed (e.g. [kueue] where every gang must go through Kueue's quota)."""
    force_admission: AdmissionMode | None = None
    """Admit every job this way whatever its scheduling.admission says (kueue: every gang goes
    through Kueue, with its scheduling.queueName or defaultKueueQueue); unset: the job's choice,
    within admissionModes."""
    default_kueue_queue: str | None = Field(None, min_length=1, max_length=63, pattern=LABEL_VALUE_PATTERN)
    """Kueue LocalQueue (in the job's namespace) of jobs admitted through Kueue that name none."""
    # -- end of the admission policy ------------------------------------------------------------------

    cpu_job_cpu: Quantity = "2"
    """CPU request and limit of each pod of a CPU job (gpuType cpu) that sets no resources.cpu."""
    cpu_job_memory: Quantity = "8Gi"
    """Memory request and limit of each pod of a CPU job that sets no resources.memory (its
    /dev/shm is capped at it)."""
    allowed_priority_classes: list[str] = Field(default_factory=list)
    """PriorityClass names (fnmatch patterns) jobs may set in spec.scheduling.priorityClassName;
    empty: none. A job naming another is held Pending (reason SettingNotAllowed)."""
    allowed_tolerations: list[str] = Field(default_factory=list)
    """Taint keys (fnmatch patterns) jobs may tolerate in spec.scheduling.tolerations; empty: none
    (the operator's own nvidia.com/gpu toleration of GPU jobs is always there). A job tolerating
    another is held Pending (reason SettingNotAllowed)."""

    @model_validator(mode="after")
    def _watched_namespaces_are_not_excluded(self) -> OperatorConfig:
        if both := sorted(set(self.watch_namespaces) & set(self.excluded_namespaces)):
            raise ValueError(f"watchNamespaces: {', '.join(both)} also in excludedNamespaces")
        return self

    @classmethod
    def load(cls, path: str | Path | None) -> OperatorConfig:
        """The file's configuration, or the defaults when `path` is None. Raises OSError,
        yaml.YAMLError or pydantic.ValidationError."""
        if path is None:
            return cls()
        return cls.model_validate(yaml.safe_load(Path(path).read_text()) or {})

    def pod_annotation_allowed(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in self.allowed_pod_annotations)

    def metrics_url_allowed(self, url: str) -> bool:
        """Whether `url` is under one of metricsUrlPrefixes, compared parsed: the same scheme and
        host, the prefix's port (its scheme's default when it names none, any port when it ends in
        ':'), and the prefix's path on a segment boundary ("/m" admits "/m" and "/m/x", not "/mx")."""
        target = _split(url)
        return target is not None and any(_under(target, _split(prefix)) for prefix in self.metrics_url_prefixes)

    def priority_class_allowed(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.allowed_priority_classes)

    def toleration_allowed(self, key: str) -> bool:
        return any(fnmatch.fnmatchcase(key, pattern) for pattern in self.allowed_tolerations)


def _split(url: str) -> tuple[str, str, int | None, str] | None:
    """(scheme, host, port or None for any, path) of a plain http(s) URL; None for anything else."""
    if not url.isascii() or not _PLAIN_URL.match(url):
        return None
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or _DOT_SEGMENT.search(parts.path):
        return None
    if port is None and not parts.netloc.endswith(":"):
        port = DEFAULT_PORTS[parts.scheme]
    return parts.scheme, parts.hostname, port, parts.path


def _under(url: tuple[str, str, int | None, str], prefix: tuple[str, str, int | None, str] | None) -> bool:
    if prefix is None or url[2] is None:
        return False
    (scheme, host, port, path), (p_scheme, p_host, p_port, p_path) = url, prefix
    base = p_path.rstrip("/")
    return (
        (scheme, host) == (p_scheme, p_host)
        and p_port in (None, port)
        and (path == base or path.startswith(base + "/") or not base)
    )
