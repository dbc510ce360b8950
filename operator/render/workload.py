"""Render the objects of one workload generation: headless Service, trainer ConfigMap, Indexed Job."""

from __future__ import annotations

from functools import lru_cache

import jinja2
import yaml

from longctx_trainer.config import dump_config

from ..api.spec import LongContextJob, LongContextJobSpec
from . import names
from .env import worker_env
from .fabrics import FabricProfile, fabric_profile
from .layout import ResolvedLayout
from .settings import OperatorSettings
from .trainer_config import trainer_config

# GPU Feature Discovery's nvidia.com/gpu.product value of each GPU type.
GPU_PRODUCTS = {
    "a100-40gb": "NVIDIA-A100-SXM4-40GB",
    "a100-80gb": "NVIDIA-A100-SXM4-80GB",
    "h100-80gb": "NVIDIA-H100-80GB-HBM3",
    "h200-141gb": "NVIDIA-H200",
    "b200-180gb": "NVIDIA-B200",
}
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}


@lru_cache(maxsize=1)
def _templates() -> jinja2.Environment:
    return jinja2.Environment(loader=jinja2.PackageLoader("longctx_operator.render", "templates"),
                              undefined=jinja2.StrictUndefined, keep_trailing_newline=True)


def _render(template: str, **values) -> dict:
    return yaml.safe_load(_templates().get_template(template).render(**values))


def common_labels(job: str) -> dict[str, str]:
    return {names.JOB_NAME_LABEL: job, "app.kubernetes.io/name": "longctx-trainer",
            "app.kubernetes.io/instance": job, "app.kubernetes.io/managed-by": "longctx-operator"}


def _resources(spec: LongContextJobSpec, fabric: FabricProfile) -> dict:
    limits: dict[str, str] = {}
    if spec.resources.gpu_type != "cpu":
        limits[GPU_RESOURCE] = str(spec.resources.gpus_per_node)
        limits.update(fabric.resources)
    if spec.resources.cpu:
        limits["cpu"] = spec.resources.cpu
    if spec.resources.memory:
        limits["memory"] = spec.resources.memory
    return {"requests": dict(limits), "limits": limits} if limits else {}


def node_selector(spec: LongContextJobSpec) -> dict[str, str]:
    selector = {}
    if spec.resources.gpu_type != "cpu":
        selector["nvidia.com/gpu.product"] = GPU_PRODUCTS[spec.resources.gpu_type]
    selector.update(spec.scheduling.node_selector)
    return selector


def tolerations(spec: LongContextJobSpec) -> list[dict]:
    user = [t.model_dump(by_alias=True, exclude_none=True) for t in spec.scheduling.tolerations]
    return ([GPU_TOLERATION] if spec.resources.gpu_type != "cpu" else []) + user


def _affinity(workload: str, spec: LongContextJobSpec) -> dict:
    """One rank per node; prefer packing the gang inside one topology domain (NVLink clique, block)."""
    same_gang = {"labelSelector": {"matchLabels": {"batch.kubernetes.io/job-name": workload}}}
    affinity: dict = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {**same_gang, "topologyKey": "kubernetes.io/hostname"}]}}
    if spec.scheduling.topology_key:
        affinity["podAffinity"] = {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": {**same_gang,
                                                 "topologyKey": spec.scheduling.topology_key}}]}
    return affinity


def _volumes(job: str, spec: LongContextJobSpec, fabric: FabricProfile) -> tuple[list, list]:
    volumes = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.resources.shared_memory}},
        {"name": "trainer-config", "configMap": {"name": names.config_map_name(job)}},
    ]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"},
              {"name": "trainer-config", "mountPath": names.CONFIG_MOUNT, "readOnly": True}]
    if spec.init_from and spec.init_from.persistent_volume_claim:
        volumes.append({"name": "initial-weights", "persistentVolumeClaim": {
            "claimName": spec.init_from.persistent_volume_claim, "readOnly": True}})
        mounts.append({"name": "initial-weights", "mountPath": spec.init_from.path, "readOnly": True})
    if spec.checkpoint.persistent_volume_claim:
        volumes.append({"name": "checkpoints", "persistentVolumeClaim": {
            "claimName": spec.checkpoint.persistent_volume_claim}})
        mounts.append({"name": "checkpoints", "mountPath": spec.checkpoint.path})
    return volumes + list(fabric.volumes), mounts + list(fabric.trainer_mounts)


def _metrics_ports(first_port: int, processes_per_pod: int) -> list[dict]:
    """One named container port per trainer process of a pod (process i listens on first_port + i)."""
    return [{"name": names.metrics_port_name(local), "containerPort": first_port + local}
            for local in range(processes_per_pod)]


def render_workload(job: LongContextJob, layout: ResolvedLayout, generation: int = 1,
                    settings: OperatorSettings | None = None) -> list[dict]:
    """Service, ConfigMap and Indexed Job of `generation` for a validated job and its layout."""
    settings = settings or OperatorSettings()
    name, spec = job.metadata.name, job.spec
    namespace = job.metadata.namespace or "default"
    workload = names.workload_name(name, generation)
    fabric = fabric_profile(spec, settings)
    labels = common_labels(name)
    volumes, mounts = _volumes(name, spec, fabric)
    pod_labels = {**labels, names.GENERATION_LABEL: str(generation)}
    job_labels = dict(pod_labels)
    if spec.scheduling.admission == "kueue":
        job_labels["kueue.x-k8s.io/queue-name"] = spec.scheduling.queue_name
    common = dict(namespace=namespace, labels=labels, service=names.service_name(name),
                  coordinator_port=spec.network.coordinator_port, metrics_port=spec.metrics.port)
    service = _render("service.yaml.j2", selector={names.JOB_NAME_LABEL: name}, **common)
    config = _render("configmap.yaml.j2", config_map=names.config_map_name(name),
                     config_file=names.CONFIG_FILE,
                     trainer_yaml=dump_config(trainer_config(name, spec, layout)), **common)
    workload_job = _render(
        "job.yaml.j2", workload=workload, job_labels=job_labels, pods=spec.resources.nodes,
        suspend=spec.scheduling.admission == "kueue",
        pod_labels=pod_labels, pod_annotations=dict(fabric.annotations),
        priority_class_name=spec.scheduling.priority_class_name,
        node_selector=node_selector(spec), tolerations=tolerations(spec),
        affinity=_affinity(workload, spec), sidecars=list(fabric.sidecars),
        image=spec.image or settings.trainer_image, image_pull_policy=settings.trainer_image_pull_policy,
        config_path=f"{names.CONFIG_MOUNT}/{names.CONFIG_FILE}",
        env=worker_env(name, spec, layout, generation, fabric), resources=_resources(spec, fabric),
        capabilities=list(fabric.capabilities), volume_mounts=mounts, volumes=volumes,
        metrics_ports=_metrics_ports(spec.metrics.port, layout.processes_per_node), **common)
    return [service, config, workload_job]


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the trainer config) as literal blocks, so they stay readable."""


def _str(dumper: yaml.SafeDumper, value: str):
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def render_yaml(objects: list[dict]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=120)
