"""The operator's own Prometheus metrics (served by `longctx operator --metrics-port`)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from .api.status import PENDING, Phase

RECONCILES = Counter("longctx_operator_reconciles", "Reconciliations of LongContextJobs by result.", ["result"])
RECONCILE_DURATION = Histogram(
    "longctx_operator_reconcile_duration_seconds",
    "Wall time of one reconciliation (decision and API calls).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
JOBS = Gauge("longctx_operator_jobs", "LongContextJobs seen by this operator, by phase.", ["phase"])
GANG_RESTARTS = Counter(
    "longctx_operator_gang_restarts",
    "Gang restarts (a generation deleted after a failure), per LongContextJob.",
    ["namespace", "job_name"],
)
ADMISSION_WAIT = Histogram(
    "longctx_operator_admission_wait_seconds",
    "Seconds from the first reconcile that left a generation Pending without a workload (admission refused) "
    "to its workload's creation; 0 when admitted at once.",
    buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
RECONCILE_LATENCY = Histogram(
    "longctx_operator_reconcile_latency_seconds",
    "Seconds from the first watch event that queued a job to the decision that followed it.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2.5, 5, 10),
)
WATCH_EVENTS = Counter(
    "longctx_operator_watch_events",
    "Objects the operator's label-selected watches delivered (listed or watched), by resource.",
    ["resource"],
)
API_REQUESTS = Counter("longctx_operator_api_requests", "Kubernetes API requests of the reconciler, by verb.", ["verb"])
PHASES = Phase.__args__


def count_phases(phases: list[str | None]) -> None:
    """Sets longctx_operator_jobs from the phases of every known job (None counts as Pending)."""
    for phase in PHASES:
        JOBS.labels(phase=phase).set(sum(1 for p in phases if (p or PENDING) == phase))


def track_job(namespace: str, name: str) -> None:
    """Create the job's restart series at 0, so its first restart shows in increase()."""
    GANG_RESTARTS.labels(namespace=namespace, job_name=name)


def forget_job(namespace: str, name: str) -> None:
    """Drop a deleted job's series: the label set stays bounded by the jobs that exist."""
    try:
        GANG_RESTARTS.remove(namespace, name)
    except KeyError:
        pass
