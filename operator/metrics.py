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


class PhaseCounts:
    """longctx_operator_jobs, kept from each job's phase as the operator's cache holds it: `see` is
    called whenever a job's cached status may have changed (a watch event, the operator's own status
    write as it returns), so the gauge never lags the status written; O(1) per call."""

    def __init__(self) -> None:
        self._phase: dict[tuple[str, str], str] = {}
        self._counts: dict[str, int] = dict.fromkeys(PHASES, 0)
        for phase in PHASES:
            JOBS.labels(phase=phase).set(0)

    def see(self, key: tuple[str, str], phase: str | None) -> None:
        """Job `key` is in `phase` now (None counts as Pending)."""
        self._move(key, phase or PENDING)

    def forget(self, key: tuple[str, str]) -> None:
        """Job `key` was deleted."""
        self._move(key, None)

    def _move(self, key: tuple[str, str], phase: str | None) -> None:
        old = self._phase.pop(key, None)
        if phase is not None:
            self._phase[key] = phase
        if old == phase:
            return
        for changed, step in ((old, -1), (phase, 1)):
            if changed is not None:
                self._counts[changed] += step
                JOBS.labels(phase=changed).set(self._counts[changed])


def track_job(namespace: str, name: str) -> None:
    """Create the job's restart series at 0, so its first restart shows in increase()."""
    GANG_RESTARTS.labels(namespace=namespace, job_name=name)


def forget_job(namespace: str, name: str) -> None:
    """Drop a deleted job's series: the label set stays bounded by the jobs that exist."""
    try:
        GANG_RESTARTS.remove(namespace, name)
    except KeyError:
        pass
