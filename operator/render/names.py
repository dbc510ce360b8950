"""Names of the objects a LongContextJob owns, derived in one place."""

from __future__ import annotations

CONFIG_MOUNT = "/etc/longctx"
CONFIG_FILE = "trainer.yaml"
JOB_NAME_LABEL = "longctx.io/job-name"
GENERATION_LABEL = "longctx.io/generation"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"


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


def coordinator_address(job: str, generation: int, port: int) -> str:
    """Rank 0's stable DNS name: <indexed-job>-0.<service> (pod hostname + subdomain)."""
    return f"{workload_name(job, generation)}-0.{service_name(job)}:{port}"
