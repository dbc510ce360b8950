"""Render the objects of one workload generation: headless Service, trainer ConfigMap, Indexed Job.

The objects are built as data, never as text: every value a job author writes arrives verbatim as
one string (or number) in one place, and no value can add keys, objects or documents. The pods
run with a restricted-compatible security context; only a fabric's own needs are added to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import yaml

from longctx_trainer.contract.config import dump_config
from longctx_trainer.contract.hardware import FABRICS, GPUS, Fabric

from .. import names
from ..api.quantity import parse_quantity
from ..api.spec import LongContextJob, LongContextJobSpec
from ..config import OperatorConfig
from ..layout import ResolvedLayout
from ..placement import placement_wanted
from ..preemption import PER_INDEX_BACKOFF, POD_FAILURE_POLICY, grace_period_seconds
from .env import worker_env
from .fabrics import FabricProfile, fabric_profile
from .trainer_config import trainer_config

GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


@dataclass(frozen=True)
class Workload:
    """The objects of one generation, in the order they are created."""

    service: dict
    config_map: dict
    job: dict
    network_policy: dict | None = None
    """Only where the configuration's gangNetworkPolicy is enabled."""

    @property
    def objects(self) -> list[dict]:
        fence = [self.network_policy] if self.network_policy else []
        return [self.service, self.config_map, *fence, self.job]


def common_labels(job: str) -> dict[str, str]:
    return {
        names.JOB_NAME_LABEL: job,
        "app.kubernetes.io/name": "longctx-trainer",
        "app.kubernetes.io/instance": job,
        "app.kubernetes.io/managed-by": "longctx-operator",
    }


def _metadata(name: str, namespace: str, labels: dict[str, str]) -> dict:
    return {"name": name, "namespace": namespace, "labels": dict(labels)}


def _cpu_and_memory(spec: LongContextJobSpec, config: OperatorConfig) -> dict[str, str]:
    """The pod's cpu and memory: the spec's, or for a CPU job (which no GPU count bounds) the
    operator's cpuJobCpu and cpuJobMemory."""
    out: dict[str, str] = {}
    cpu_job = spec.on_cpu
    if cpu := spec.resources.cpu or (config.cpu_job_cpu if cpu_job else None):
        out["cpu"] = cpu
    if memory := spec.resources.memory or (config.cpu_job_memory if cpu_job else None):
        out["memory"] = memory
    return out


def _resources(spec: LongContextJobSpec, fabric: FabricProfile, config: OperatorConfig) -> dict:
    limits: dict[str, str] = {}
    if not spec.on_cpu:
        limits.update(fabric.resources)
        limits[GPU_RESOURCE] = str(spec.resources.gpus_per_node)  # never a fabric's to change
    limits.update(_cpu_and_memory(spec, config))
    return {"requests": dict(limits), "limits": limits} if limits else {}


def shared_memory(spec: LongContextJobSpec, config: OperatorConfig) -> str:
    """Size limit of /dev/shm: resources.sharedMemory, capped at the pod's memory limit (the tmpfs
    pages count against it, so a larger limit only hides where the memory goes)."""
    memory = _cpu_and_memory(spec, config).get("memory")
    if memory is not None and parse_quantity(memory) < parse_quantity(spec.resources.shared_memory):
        return memory
    return spec.resources.shared_memory


def node_selector(spec: LongContextJobSpec) -> dict[str, str]:
    selector = dict(spec.scheduling.node_selector)
    if not spec.on_cpu:
        selector["nvidia.com/gpu.product"] = GPUS[spec.resources.gpu_type].product
    return selector


def tolerations(spec: LongContextJobSpec) -> list[dict]:
    user = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.scheduling.tolerations]
    return ([GPU_TOLERATION] if not spec.on_cpu else []) + user


NODE_LOST_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
"""The NoExecute taints the node lifecycle controller puts on a NotReady or unreachable node."""


def node_lost_tolerations(spec: LongContextJobSpec) -> list[dict]:
    """Tolerate a lost node for restartPolicy.nodeLostSeconds only (Kubernetes' default is 300 s):
    the taint manager then marks the rank's pod for disruption and the operator restarts the gang
    on other nodes (observe.lost_node). A key the job tolerates itself keeps the job's toleration."""
    own = {t.key for t in spec.scheduling.tolerations}
    return [
        {
            "key": key,
            "operator": "Exists",
            "effect": "NoExecute",
            "tolerationSeconds": spec.restart_policy.node_lost_seconds,
        }
        for key in NODE_LOST_TAINTS
        if key not in own
    ]


def _affinity(workload: str, spec: LongContextJobSpec) -> dict:
    """One rank per node; prefer packing the gang inside one topology domain (NVLink clique, block)."""
    same_gang = {"labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": workload}}}
    affinity: dict = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [{**same_gang, "topologyKey": "kubernetes.io/hostname"}]
        }
    }
    if spec.scheduling.topology_key:
        affinity["podAffinity"] = {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "podAffinityTerm": {**same_gang, "topologyKey": spec.scheduling.topology_key}}
            ]
        }
    return affinity


def _config_sources(job: str, spec: LongContextJobSpec, config: OperatorConfig) -> list[dict]:
    """The trainer's config (the ConfigMap) and, where the operator writes it (placement.py), the
    pod's placement annotation as a file beside it: the kubelet refreshes it once written."""
    sources: list[dict] = [{"configMap": {"name": names.config_map_name(job)}}]
    if placement_wanted(spec, config):
        annotation = f"metadata.annotations['{names.PLACEMENT_ANNOTATION}']"
        sources.append(
            {"downwardAPI": {"items": [{"path": names.PLACEMENT_FILE, "fieldRef": {"fieldPath": annotation}}]}}
        )
    return sources


def _volumes(job: str, spec: LongContextJobSpec, fabric: FabricProfile, config: OperatorConfig) -> tuple[list, list]:
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shared_memory(spec, config)}},
        {"name": "trainer-config", "projected": {"sources": _config_sources(job, spec, config)}},
    ]
    mounts = [
        {"name": "dshm", "mountPath": names.SHM_MOUNT},
        {"name": "trainer-config", "mountPath": names.CONFIG_MOUNT, "readOnly": True},
    ]
    if spec.init_from and spec.init_from.persistent_volume_claim:
        volumes.append(
            {
                "name": "initial-weights",
                "persistentVolumeClaim": {"claimName": spec.init_from.persistent_volume_claim, "readOnly": True},
            }
        )
        mounts.append({"name": "initial-weights", "mountPath": spec.init_from.path, "readOnly": True})
    if spec.checkpoint.persistent_volume_claim:
        volumes.append(
            {"name": "checkpoints", "persistentVolumeClaim": {"claimName": spec.checkpoint.persistent_volume_claim}}
        )
        mounts.append({"name": "checkpoints", "mountPath": spec.checkpoint.path})
    return volumes + [dict(v) for v in fabric.volumes], mounts + [dict(m) for m in fabric.trainer_mounts]


def _ports(spec: LongContextJobSpec, processes_per_pod: int) -> list[dict]:
    """One named metrics port per trainer process of a pod (process i listens on port + i)."""
    return [
        *(
            {"name": names.metrics_port_name(local), "containerPort": spec.metrics.port + local}
            for local in range(processes_per_pod)
        ),
        {"name": "coordinator", "containerPort": spec.network.coordinator_port},
    ]


def pod_security_context(config: OperatorConfig) -> dict:
    """Pod Security "restricted" at pod level: a fixed non-root user, the runtime's seccomp profile."""
    uid = config.trainer_user
    return {
        "runAsNonRoot": True,
        "runAsUser": uid,
        "runAsGroup": uid,
        "fsGroup": uid,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def container_security_context(fabric: Fabric) -> dict:
    """No privilege escalation, every capability dropped but what the fabric needs (IPC_LOCK for
    RDMA memory registration): "restricted" on tcp, "privileged" where a capability is added."""
    capabilities: dict = {"drop": ["ALL"]}
    if fabric.capabilities:
        capabilities["add"] = list(fabric.capabilities)
    return {"allowPrivilegeEscalation": False, "capabilities": capabilities}


def _service(name: str, namespace: str, spec: LongContextJobSpec) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(names.service_name(name), namespace, common_labels(name)),
        "spec": {
            "clusterIP": "None",
            # Ranks must resolve each other before they are Ready: the coordinator waits for all.
            "publishNotReadyAddresses": True,
            "selector": {names.JOB_NAME_LABEL: name},
            "ports": [
                {
                    "name": "coordinator",
                    "port": spec.network.coordinator_port,
                    "targetPort": spec.network.coordinator_port,
                },
                {"name": "metrics", "port": spec.metrics.port, "targetPort": spec.metrics.port},
            ],
        },
    }


def _network_policy(
    name: str, namespace: str, spec: LongContextJobSpec, layout: ResolvedLayout, config: OperatorConfig
) -> dict:
    """The gang's fence: its pods take connections from each other on any port (NCCL and gloo pick
    theirs at random) and from the configured metrics readers (the operator, Prometheus) on the
    metrics ports alone; nothing else reaches them, the rendezvous port included. Stable across
    generations, like the Service."""
    gang = {"matchLabels": {names.JOB_NAME_LABEL: name}}
    metrics = {"protocol": "TCP", "port": spec.metrics.port}
    if layout.processes_per_node > 1:
        metrics["endPort"] = spec.metrics.port + layout.processes_per_node - 1
    ingress = [{"from": [{"podSelector": gang}]}]
    if config.gang_network_policy.metrics_readers:
        ingress.append(
            {"from": [dict(peer) for peer in config.gang_network_policy.metrics_readers], "ports": [metrics]}
        )
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(names.service_name(name), namespace, common_labels(name)),
        "spec": {"podSelector": gang, "policyTypes": ["Ingress"], "ingress": ingress},
    }


def _config_map(name: str, namespace: str, spec: LongContextJobSpec, layout: ResolvedLayout) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(names.config_map_name(name), namespace, common_labels(name)),
        "data": {names.CONFIG_FILE: dump_config(trainer_config(name, spec, layout))},
    }


BUNDLED_TRAINER_COMMAND = [
    "python",
    "-m",
    "longctx_trainer.launch",
    "--config",
    f"{names.CONFIG_MOUNT}/{names.CONFIG_FILE}",
]


def _job(
    name: str, namespace: str, spec: LongContextJobSpec, layout: ResolvedLayout, generation: int, config: OperatorConfig
) -> dict:
    workload = names.workload_name(name, generation)
    fabric = fabric_profile(spec, config)
    pod_labels = {**common_labels(name), names.GENERATION_LABEL: str(generation)}
    job_labels = dict(pod_labels)
    pod_annotations = dict(fabric.annotations)
    if spec.scheduling.admission == "kueue":
        job_labels[names.KUEUE_QUEUE_LABEL] = spec.scheduling.queue_name
        if spec.scheduling.workload_priority_class_name:
            job_labels[names.KUEUE_PRIORITY_LABEL] = spec.scheduling.workload_priority_class_name
        if spec.scheduling.kueue_topology != "none":
            pod_annotations[names.KUEUE_TOPOLOGY_ANNOTATIONS[spec.scheduling.kueue_topology]] = (
                spec.scheduling.topology_key
            )
    volumes, mounts = _volumes(name, spec, fabric, config)
    trainer = {
        "name": names.TRAINER_CONTAINER,
        "image": (spec.trainer and spec.trainer.image) or spec.image or config.trainer_image,
        "imagePullPolicy": config.trainer_image_pull_policy,
        "command": (spec.trainer and spec.trainer.command) or BUNDLED_TRAINER_COMMAND,
        "env": worker_env(
            names.rank0_host(name, generation, namespace, config.cluster_domain),
            spec,
            layout,
            generation,
            fabric,
            config,
        ),
        "ports": _ports(spec, layout.processes_per_node),
        "resources": _resources(spec, fabric, config),
        "securityContext": container_security_context(FABRICS[spec.network.fabric]),
        "volumeMounts": mounts,
    }
    pod_spec: dict = {
        "subdomain": names.service_name(name),
        "restartPolicy": "Never",
        # Room to finish the step and save on SIGTERM (preemption.py).
        "terminationGracePeriodSeconds": grace_period_seconds(spec, layout),
        "enableServiceLinks": False,
        # The trainer never calls the Kubernetes API: no token in its pods.
        "automountServiceAccountToken": False,
        "securityContext": pod_security_context(config),
        "nodeSelector": node_selector(spec),
        "tolerations": tolerations(spec) + node_lost_tolerations(spec),
        "affinity": _affinity(workload, spec),
        "containers": [trainer],
        "volumes": volumes,
    }
    if spec.trainer is not None and spec.trainer.args:
        trainer["args"] = list(spec.trainer.args)
    if spec.scheduling.priority_class_name:
        pod_spec["priorityClassName"] = spec.scheduling.priority_class_name
    if fabric.sidecars:
        pod_spec["initContainers"] = [dict(s) for s in fabric.sidecars]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _metadata(workload, namespace, job_labels),
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.resources.nodes,
            "parallelism": spec.resources.nodes,
            # The operator restarts the whole gang itself: one failed rank fails the Job at once.
            "backoffLimit": 0,
            # ... except a preempted rank, which saved a checkpoint: the Job replaces its pod.
            "podFailurePolicy": POD_FAILURE_POLICY,
            **PER_INDEX_BACKOFF,
            "podReplacementPolicy": "Failed",
            "suspend": spec.scheduling.admission == "kueue",
            "template": {"metadata": {"labels": pod_labels, "annotations": pod_annotations}, "spec": pod_spec},
        },
    }


def render_workload(
    job: LongContextJob, layout: ResolvedLayout, generation: int = 1, config: OperatorConfig | None = None
) -> Workload:
    """Service, ConfigMap and Indexed Job of `generation` for a validated job and its layout."""
    config = config or OperatorConfig()
    name, spec = job.metadata.name, job.spec
    namespace = job.metadata.namespace or "default"
    return Workload(
        service=_service(name, namespace, spec),
        config_map=_config_map(name, namespace, spec, layout),
        job=_job(name, namespace, spec, layout, generation, config),
        network_policy=(
            _network_policy(name, namespace, spec, layout, config) if config.gang_network_policy.enabled else None
        ),
    )


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the trainer config) as literal blocks, so they stay readable."""


# Line breaks other than \n: PyYAML writes them raw inside single quotes, where a reader folds them
# (NEL becomes a space), so such strings go double-quoted, where they are escapes (\N, \L, \P, \r).
_OTHER_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def _str(dumper: yaml.SafeDumper, value: str):
    # The emitter falls back to a quoted style where a block cannot hold the string exactly.
    if any(c in value for c in _OTHER_BREAKS):
        style = '"'
    else:
        style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_yaml(objects: list[dict]) -> str:
    """The objects as YAML documents; any Unicode text is written as itself (never as escapes)."""
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)
