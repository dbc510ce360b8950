"""status.progress from rank 0's Prometheus exposition text (the trainer's exporter, trainer/metrics.py)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from .api.status import ProgressStatus

STEP = "longctx_train_step"
TOKENS_PER_SECOND = "longctx_train_tokens_per_second"
LOSS = "longctx_train_loss"
MFU = "longctx_train_mfu_ratio"
LAST_CHECKPOINT = "longctx_train_last_checkpoint_step"
MFU_CONVENTION = "causal"
METRICS_URL_ANNOTATION = "longctx.io/metrics-url"


def _rank0_values(text: str) -> dict[str, float]:
    """Sample name -> value for rank 0 (or unlabelled samples), MFU only in the causal convention."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("rank", "0") != "0":
                continue
            if sample.name == MFU and sample.labels.get("convention") != MFU_CONVENTION:
                continue
            values[sample.name] = sample.value
    return values


def parse_progress(text: str, updated_at: str) -> ProgressStatus | None:
    """The progress in `text`, or None when it has no training metrics yet (before the first step)."""
    v = _rank0_values(text)
    if not any(name in v for name in (STEP, TOKENS_PER_SECOND, LOSS)):
        return None

    def integer(name: str) -> int | None:
        return int(v[name]) if name in v else None

    return ProgressStatus(step=integer(STEP), tokens_per_second=v.get(TOKENS_PER_SECOND), mfu=v.get(MFU),
                          loss=v.get(LOSS), last_checkpoint_step=integer(LAST_CHECKPOINT),
                          updated_at=updated_at)


def metrics_url(annotations: dict[str, str], rank0_pod_ip: str | None, port: int) -> str | None:
    """Where rank 0's exporter is: the job's longctx.io/metrics-url annotation (for clusters where
    the operator cannot reach pod IPs), else http://<rank-0 pod IP>:<spec.metrics.port>/metrics."""
    if annotations.get(METRICS_URL_ANNOTATION):
        return annotations[METRICS_URL_ANNOTATION]
    if rank0_pod_ip:
        host = f"[{rank0_pod_ip}]" if ":" in rank0_pod_ip else rank0_pod_ip
        return f"http://{host}:{port}/metrics"
    return None
