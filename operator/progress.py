"""status.progress from rank 0's Prometheus exposition (the trainer's exporter, trainer/contract/metrics.py).

The operator reads rank 0 over plain http at its pod IP, or at a URL the job's
longctx.io/metrics-url annotation names, only under a prefix the admin allows
(OperatorConfig.metricsUrlPrefixes). Whatever serves it is the job author's: the read has a hard
deadline and a size cap (scrape.py), the text is read by a bounded linear scanner off the event
loop (contract/exposition.py), every value is checked for size and sign before it reaches the status, and
each job is read by its own task, so one slow or hostile endpoint delays only its own job's
progress. What a body holds never reaches a log.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from longctx_trainer.contract.exposition import (
    IN_PLACE_RESTARTS,
    LAST_CHECKPOINT,
    LAST_CHECKPOINT_TIME,
    LOSS,
    MFU,
    RESUMED_FROM,
    STEP,
    TOKENS_PER_SECOND,
    MetricsUnreadable,
    rank0_values,
)

from .api.spec import LongContextJobSpec
from .api.status import ProgressStatus
from .config import OperatorConfig
from .inplace_restarts import in_place_budget, in_place_restarts, shown_in_place_restarts
from .jobtasks import RunningJobTasks
from .names import METRICS_URL_ANNOTATION
from .observe import pod_rank, serving, timestamp
from .scrape import NotListening, Response, fetch_metrics

log = logging.getLogger("longctx.operator")

MAX_TOKENS_PER_SECOND = 1e12
"""Beyond any cluster's throughput: a larger value is not shown."""
MAX_ABS_LOSS = 1e6
MAX_ETA_SECONDS = 10 * 365 * 86400.0
"""A longer estimate is not shown (and could not be a date)."""
MAX_PERCENT_RUNNING = 99.9
"""A Running job is not done, whatever its trainer reports: the phase says when it is."""
BACKOFF_MAX_SECONDS = 60.0
"""Reads of an endpoint that keeps failing slow down to one a minute (or one an interval if longer)."""


def _within(value: float | None, low: float, high: float) -> float | None:
    return value if value is not None and low <= value <= high else None  # NaN and infinities fail


def _count(value: float | None) -> int | None:
    value = _within(value, 0, 2.0**62)
    return int(value) if value is not None else None


def _tenths(value: float | None) -> float | None:
    """A rate as `kubectl get` shows it (its Tokens/s column prints every digit it is given)."""
    return round(value, 1) if value is not None else None


def _unix_time(value: float | None) -> str | None:
    """A Unix time as RFC 3339, or None outside years 2000..2200 (no trainer checkpoints then)."""
    value = _within(value, 946684800.0, 7258118400.0)
    return timestamp(datetime.fromtimestamp(value, UTC)) if value is not None else None


@dataclass(frozen=True)
class Reading:
    """One read of rank 0's exposition."""

    progress: ProgressStatus | None
    """None when it has no training metrics yet (before the first step)."""
    in_place_restarts: float | None
    """The `longctx_train_in_place_restarts` sample as served, unchecked (inplace_restarts.py checks it)."""


def read_rank0(body: bytes, updated_at: str) -> Reading:
    """The progress in rank 0's exposition `body` and its in-place restarts. Values the exporter (the
    job author's image) could not mean are dropped: non-finite ones, a negative step, MFU outside
    0..1, tokens/s or loss beyond any real run. Raises MetricsUnreadable for a malformed sample of a
    progress metric."""
    v = rank0_values(body)
    if not any(name in v for name in (STEP, TOKENS_PER_SECOND, LOSS)):
        return Reading(None, None)
    progress = ProgressStatus(
        step=_count(v.get(STEP)),
        tokens_per_second=_tenths(_within(v.get(TOKENS_PER_SECOND), 0.0, MAX_TOKENS_PER_SECOND)),
        mfu=_within(v.get(MFU), 0.0, 1.0),
        loss=_within(v.get(LOSS), -MAX_ABS_LOSS, MAX_ABS_LOSS),
        last_checkpoint_step=_count(v.get(LAST_CHECKPOINT)),
        updated_at=updated_at,
        resumed_from_step=_count(v.get(RESUMED_FROM)),
        last_checkpoint_time=_unix_time(v.get(LAST_CHECKPOINT_TIME)),
    )
    return Reading(progress, v.get(IN_PLACE_RESTARTS))


def _parse_response(response: Response, updated_at: str) -> Reading:
    return read_rank0(response.payload(), updated_at)


@dataclass(frozen=True)
class MetricsSource:
    url: str | None
    """Where to read rank 0's metrics; None while rank 0 has no pod IP."""
    refused: str | None = None
    """Why the job's own URL annotation was not used."""


def metrics_source(
    annotations: dict[str, str], rank0_pod_ip: str | None, port: int, config: OperatorConfig
) -> MetricsSource:
    """Rank 0's exporter: the annotation's URL when the admin allows it, else
    http://<rank-0 pod IP>:<spec.metrics.port>/metrics."""
    requested = annotations.get(METRICS_URL_ANNOTATION)
    if requested and config.metrics_url_allowed(requested):
        return MetricsSource(requested)
    refused = (
        (
            f"annotation {METRICS_URL_ANNOTATION} is not under the operator's metricsUrlPrefixes; "
            f"reading rank 0 at its pod IP"
        )
        if requested
        else None
    )
    if not rank0_pod_ip:
        return MetricsSource(None, refused)
    host = f"[{rank0_pod_ip}]" if ":" in rank0_pod_ip else rank0_pod_ip
    return MetricsSource(f"http://{host}:{port}/metrics", refused)


@dataclass(frozen=True)
class Backoff:
    """Failed reads in a row of one endpoint. A replaced rank 0 (a pod with another IP, after a
    preemption in place or a gang restart) is another endpoint and is read at the interval at
    once: the failures of the pod it replaced, read as it ended, do not delay its first progress
    by up to BACKOFF_MAX_SECONDS. A refused connection (scrape.NotListening: a trainer restarting
    in its pod) is not counted: it costs one connect, and the restarted trainer's progress is read
    at the next interval."""

    url: str | None = None
    failures: int = 0

    def after(self, url: str | None, failed: bool) -> Backoff:
        if not failed:
            return Backoff(url)
        return Backoff(url, self.failures + 1 if url == self.url else 1)


RATE_WINDOW_SECONDS = 300.0
"""Reads of the last five minutes set the step rate: recent enough to follow a slowdown, long
enough to average over checkpoint pauses."""


@dataclass(frozen=True)
class Completion:
    percent: float | None
    eta_seconds: float | None


def completion(
    reads: list[tuple[float, int]], total_steps: int, window_seconds: float = RATE_WINDOW_SECONDS
) -> Completion:
    """Percent done and seconds left of a Running job from (time, step) reads of rank 0, oldest
    first. The rate is taken over the reads of the last `window_seconds` after the last restart (a
    step lower than the one before: the gang resumed from a checkpoint); no estimate until the step
    has moved, once the step has reached `total_steps` (the job is still running: its phase says
    when it is done), or when it is more than MAX_ETA_SECONDS away. The percent is at most
    MAX_PERCENT_RUNNING."""
    if not reads or total_steps <= 0:
        return Completion(None, None)
    now, step = reads[-1]
    percent = round(max(0.0, min(MAX_PERCENT_RUNNING, 100.0 * step / total_steps)), 1)
    since_restart = reads[max((i for i in range(1, len(reads)) if reads[i][1] < reads[i - 1][1]), default=0) :]
    recent = [(t, s) for t, s in since_restart if t >= now - window_seconds]
    (t0, s0) = recent[0]
    if step >= total_steps or step <= s0 or now <= t0:
        return Completion(percent, None)
    eta = (total_steps - step) * (now - t0) / (step - s0)
    return Completion(percent, eta if eta <= MAX_ETA_SECONDS else None)


def within_steps(progress: ProgressStatus, total_steps: int) -> ProgressStatus:
    """`progress` with its step and last checkpoint step at most `total_steps` (spec.steps)."""
    return progress.model_copy(
        update={
            name: min(value, total_steps)
            for name in ("step", "last_checkpoint_step", "resumed_from_step")
            if (value := getattr(progress, name)) is not None
        }
    )


def duration_text(seconds: float) -> str:
    """A duration as kubectl prints ages: 45s, 12m, 1h12m, 3d4h."""
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days}d{hours}h" if hours else f"{days}d"
    if hours:
        return f"{hours}h{minutes}m" if minutes else f"{hours}h"
    if minutes:
        return f"{minutes}m{secs}s" if minutes < 10 and secs else f"{minutes}m"
    return f"{secs}s"


def progress_patch(progress: ProgressStatus) -> dict:
    """The status merge patch of one read: every field, None included, so that what this read left
    out (an ETA at the last step or after a restart, a value out of range) is deleted instead of
    keeping the value of an earlier read."""
    return {"progress": progress.model_dump(by_alias=True)}


class ProgressPoller(RunningJobTasks):
    """The operator's progress timer: one task per Running job reads rank 0's metrics every
    progress interval and patches status.progress. Each task waits only for its own job's reads
    (bounded by scrape.TIMEOUT_SECONDS), backs off while they fail and ends when the job is no
    longer Running, so a slow or hostile endpoint delays nobody else's progress. Reads are
    asynchronous (no thread waits on a socket), the exposition is read on a small thread pool,
    and `call` runs a blocking API call off the event loop."""

    task_name = "progress"

    def __init__(self, cache, kube, call, config: OperatorConfig):
        super().__init__(cache, config)
        self.kube, self.call = kube, call
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="exposition")
        self._reads: dict = {}  # job key -> [(monotonic time, step)] of the rate window
        self._refusals: dict = {}  # job key -> the metrics-url refusal last logged

    def forget(self, key) -> None:
        self._reads.pop(key, None)
        self._refusals.pop(key, None)
        self._cancel(key)

    def _with_completion(self, key, obj: dict, progress: ProgressStatus) -> ProgressStatus:
        total = (obj.get("spec") or {}).get("steps") or LongContextJobSpec.model_fields["steps"].default
        progress = within_steps(progress, total)
        if progress.step is None:
            return progress
        now = time.monotonic()
        reads = [r for r in self._reads.get(key, []) if r[0] >= now - RATE_WINDOW_SECONDS] + [(now, progress.step)]
        self._reads[key] = reads
        done = completion(reads, total)
        update = {"percent_complete": done.percent}
        if done.eta_seconds is not None:
            update["eta"] = duration_text(done.eta_seconds)
            finish = datetime.now(UTC) + timedelta(seconds=done.eta_seconds)
            update["estimated_completion_time"] = timestamp(finish)
        return progress.model_copy(update=update)

    def stop(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    def rank0_url(self, key, obj: dict) -> str | None:
        status = obj.get("status") or {}
        rank0 = next(
            (
                p
                for p in self.cache.generation_pods(key, status.get("workloadGeneration") or 0)
                if pod_rank(p) == 0 and serving(p)
            ),
            None,
        )
        port = ((obj.get("spec") or {}).get("metrics") or {}).get("port", 9400)
        source = metrics_source(
            obj["metadata"].get("annotations") or {}, rank0["status"].get("podIP") if rank0 else None, port, self.config
        )
        if source.refused and self._refusals.get(key) != source.refused:  # once, not every read
            self._refusals[key] = source.refused
            log.warning("%s/%s: %s", *key, source.refused)
        return source.url

    def endpoint(self, key) -> str | None:
        """Rank 0's metrics URL now: None while the job is not Running or rank 0 has no pod IP."""
        obj = self._running(key)
        return self.rank0_url(key, obj) if obj is not None else None

    async def scrape(self, key, url: str | None) -> None:
        """One read of `url`, the job's rank 0 (`endpoint`), and, when it shows training metrics,
        one status patch. Raises MetricsUnreadable when the endpoint cannot be read."""
        if url is None:
            return
        response = await fetch_metrics(url)
        loop = asyncio.get_running_loop()
        reading = await loop.run_in_executor(self._threads, _parse_response, response, timestamp(datetime.now(UTC)))
        if reading.progress is not None and (obj := self._running(key)) is not None:  # still Running after the read
            progress = self._with_completion(key, obj, reading.progress)
            status = obj.get("status") or {}
            in_place = in_place_restarts(
                shown_in_place_restarts(status),
                reading.in_place_restarts,
                in_place_budget(obj.get("spec") or {}),
                status.get("workloadGeneration") or 0,
            )
            progress = progress.model_copy(update={"in_place_restarts": in_place.count})
            updated = await self.call(self.kube.patch_status, *key, progress_patch(progress))
            self.cache.put_job(updated, deleted=False)
            for event in in_place.events:  # after the patch: the status says it first
                try:
                    await self.call(self.kube.post_event, updated, event.type, event.reason, event.message)
                except Exception as e:  # noqa: BLE001 - an Event lost; the status has the count
                    log.warning("%s/%s: event %s not posted: %s", *key, event.reason, e)

    def next_read_delay(self, failures: int) -> float:
        """Seconds from one read's start to the next: the interval, doubling while reads of one
        endpoint fail, up to BACKOFF_MAX_SECONDS (or the interval, if that is longer)."""
        interval = self.config.progress_interval_seconds
        return min(max(interval, BACKOFF_MAX_SECONDS), interval * 2.0 ** min(failures, 16))

    async def follow(self, key) -> None:
        """Reads one job's progress while it is Running; the first read at a random point of the
        first interval, so jobs found together (an operator start) are not read all at once."""
        loop = asyncio.get_running_loop()
        backoff = Backoff()
        try:
            await asyncio.sleep(random.uniform(0, self.config.progress_interval_seconds))
            while self._running(key) is not None:
                started = loop.time()
                url = self.endpoint(key)
                try:
                    await self.scrape(key, url)
                    backoff = backoff.after(url, failed=False)
                except MetricsUnreadable as e:  # refused (NotListening) costs one connect: it slows nothing
                    backoff = backoff.after(url, failed=not isinstance(e, NotListening))
                    log.debug("%s/%s: metrics unreadable: %s", *key, e)
                except Exception as e:  # noqa: BLE001 - the status patch: retried at the next read
                    backoff = backoff.after(url, failed=True)
                    log.warning("%s/%s: progress not updated: %s", *key, e)
                await asyncio.sleep(max(0.0, started + self.next_read_delay(backoff.failures) - loop.time()))
        finally:
            self._ended(key)
