"""Wire names in one place: the labels and annotations longctx reads and writes, the mount points
the trainer relies on, and the names of the objects a LongContextJob owns."""

from __future__ import annotations

GROUP, VERSION, KIND = "longctx.io", "v1alpha1", "LongContextJob"
"""The custom resource's API group, version and kind."""
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL, SINGULAR = "longcontextjobs", "longcontextjob"

TRAINER_CONTAINER = "trainer"
CONFIG_MOUNT = "/etc/longctx"
CONFIG_FILE = "trainer.yaml"
SHM_MOUNT = "/dev/shm"
RESERVED_MOUNTS = (CONFIG_MOUNT, SHM_MOUNT)
"""Where the operator mounts its own volumes: a job's claims may not be mounted on or under them."""

JOB_NAME_LABEL = "longctx.io/job-name"
GENERATION_LABEL = "longctx.io/generation"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
"""On the Job: its Kueue WorkloadPriorityClass."""
KUEUE_TOPOLOGY_ANNOTATIONS = {
    "preferred": "kueue.x-k8s.io/podset-preferred-topology",
    "required": "kueue.x-k8s.io/podset-required-topology",
}
"""On the pod template: the node label whose one domain Kueue places the gang in (its TAS)."""
ZONE_LABEL = "topology.kubernetes.io/zone"
"""The node's zone, which Kubernetes copies onto the pods bound to the node (KEP-4742): the
outermost topology level the trainer orders its rings by (contract/topology.py)."""
KUEUE_WORKLOAD_GROUP, KUEUE_WORKLOAD_VERSION, KUEUE_WORKLOAD_PLURAL = "kueue.x-k8s.io", "v1beta2", "workloads"
"""Kueue's Workload, which it creates for each Job it manages: its conditions say why it waits."""

PLACEMENT_ANNOTATION = "longctx.io/placement"
"""On a bound trainer pod, written by the operator only (placement.py): its node's values of the
topology levels, which the trainer reads as PLACEMENT_FILE to order its rings."""
PLACEMENT_FILE = "placement.json"
"""The annotation as a file in the trainer's CONFIG_MOUNT (a downward-API source of that volume)."""
PLACEMENT_TABLE_FILE = "placement-table.json.gz"
"""The ConfigMap's key, and so the file in CONFIG_MOUNT, of the gang's placement table: the
placement of each node it may run on (placement.PlacementTables)."""
POD_ANNOTATIONS_ANNOTATION = "longctx.io/pod-annotations"
"""On a LongContextJob: a JSON object of annotations for its pods (keys the admin allows)."""
METRICS_URL_ANNOTATION = "longctx.io/metrics-url"
"""On a LongContextJob: where to read rank 0's metrics (URL prefixes the admin allows)."""


def metrics_port_name(local_process: int) -> str:
    """Container port name of local process `local_process`'s exporter (metrics.port + local_process):
    "metrics", "metrics-1", ...; the chart's PodMonitor keeps ports matching metrics(-[0-9]+)?."""
    return "metrics" if local_process == 0 else f"metrics-{local_process}"


def service_name(job: str) -> str:
    """The headless Service: stable across generations, so rank DNS names only change with the Job."""
    return job


def workload_name(job: str, generation: int) -> str:
    """The Indexed Job of one generation (a gang restart creates the next one)."""
    return f"{job}-g{generation}"


def config_map_name(job: str) -> str:
    return f"{job}-trainer"


def rank0_host(job: str, generation: int, namespace: str, cluster_domain: str) -> str:
    """Rank 0's DNS name, fully qualified: <indexed-job>-0.<service>.<namespace>.svc.<clusterDomain>.
    (pod hostname + subdomain). The trailing dot keeps the resolver off its search path: a shorter
    name would first be tried as `<indexed-job>-0.<service>.svc.<clusterDomain>`, a Service in a
    namespace named like the job, and then on public DNS, until rank 0 has its record."""
    return f"{workload_name(job, generation)}-0.{service_name(job)}.{namespace}.svc.{cluster_domain}."


def coordinator_address(rank0: str, port: int) -> str:
    return f"{rank0}:{port}"
