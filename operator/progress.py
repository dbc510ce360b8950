"""status.progress from rank 0's Prometheus exposition text (the trainer's exporter, trainer/metrics.py).

The operator reads rank 0 over plain http at its pod IP, or at a URL the job's
longctx.io/metrics-url annotation names, only under a prefix the admin allows
(OperatorConfig.metricsUrlPrefixes). Reads are bounded in size and time, follow no redirects and
use no proxy; what a body holds never reaches a log.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from prometheus_client.parser import text_string_to_metric_families

from .api.spec import LongContextJobSpec
from .api.status import ProgressStatus
from .config import OperatorConfig
from .lifecycle import timestamp
from .names import METRICS_URL_ANNOTATION
from .observe import pod_rank

log = logging.getLogger("longctx.operator")

STEP = "longctx_train_step"
TOKENS_PER_SECOND = "longctx_train_tokens_per_second"
LOSS = "longctx_train_loss"
MFU = "longctx_train_mfu_ratio"
LAST_CHECKPOINT = "longctx_train_last_checkpoint_step"
MFU_CONVENTION = "causal"
MFU_PEAK = "bf16"  # a trainer without the peak label reports against the bf16 peak (the contract)
MAX_BODY_BYTES = 1 * 2**20
"""A trainer's exposition is a few kilobytes; anything past this is not read."""
TIMEOUT_SECONDS = 2.0


class MetricsUnreadable(Exception):
    """Rank 0's metrics could not be read; the message never contains the response body."""


def _rank0_values(text: str) -> dict[str, float]:
    """Sample name -> value for rank 0 (or unlabelled samples), MFU only in the causal convention
    against the bf16 peak."""
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("rank", "0") != "0":
                continue
            if sample.name == MFU and (
                sample.labels.get("convention") != MFU_CONVENTION or sample.labels.get("peak", MFU_PEAK) != MFU_PEAK
            ):
                continue
            values[sample.name] = sample.value
    return values


def parse_progress(text: str, updated_at: str) -> ProgressStatus | None:
    """The progress in `text`, or None when it has no training metrics yet (before the first step).
    Raises MetricsUnreadable when the text is not Prometheus exposition."""
    try:
        v = _rank0_values(text)
    except (ValueError, TypeError, IndexError) as e:  # the parser's messages quote the body
        raise MetricsUnreadable(f"not Prometheus text ({type(e).__name__})") from None
    if not any(name in v for name in (STEP, TOKENS_PER_SECOND, LOSS)):
        return None

    def number(name: str) -> float | None:  # the exporter runs the job author's image: trust no value
        value = v.get(name)
        return value if value is not None and math.isfinite(value) else None

    def integer(name: str) -> int | None:
        value = number(name)
        return int(value) if value is not None and abs(value) < 2**63 else None

    return ProgressStatus(
        step=integer(STEP),
        tokens_per_second=number(TOKENS_PER_SECOND),
        mfu=number(MFU),
        loss=number(LOSS),
        last_checkpoint_step=integer(LAST_CHECKPOINT),
        updated_at=updated_at,
    )


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


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, "redirects are not followed", headers, fp)


_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())


def fetch_metrics(url: str, limit: int = MAX_BODY_BYTES, timeout: float = TIMEOUT_SECONDS) -> str:
    """The exposition text at an http(s) `url`, at most `limit` bytes; raises MetricsUnreadable."""
    if not url.startswith(("http://", "https://")):
        raise MetricsUnreadable("only http and https URLs are read")
    deadline = time.monotonic() + timeout
    body = b""
    try:
        with _OPENER.open(url, timeout=timeout) as response:
            while len(body) <= limit:  # a server that trickles bytes is cut off at the deadline
                chunk = response.read1(min(65536, limit + 1 - len(body)))
                if not chunk:
                    break
                body += chunk
                if time.monotonic() > deadline:
                    raise MetricsUnreadable(f"response took longer than {timeout:.0f} s")
    except (OSError, ValueError) as e:
        raise MetricsUnreadable(f"{type(e).__name__}: {getattr(e, 'reason', None) or getattr(e, 'code', '')}") from None
    if len(body) > limit:
        raise MetricsUnreadable(f"response larger than {limit} bytes")
    return body.decode("utf-8", errors="replace")


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
    """Percent done and seconds left from (time, step) reads of rank 0, oldest first. The rate is
    taken over the reads of the last `window_seconds` after the last restart (a step lower than
    the one before: the gang resumed from a checkpoint); no estimate until the step has moved."""
    if not reads or total_steps <= 0:
        return Completion(None, None)
    now, step = reads[-1]
    percent = round(min(100.0, 100.0 * step / total_steps), 1)
    since_restart = reads[max((i for i in range(1, len(reads)) if reads[i][1] < reads[i - 1][1]), default=0) :]
    recent = [(t, s) for t, s in since_restart if t >= now - window_seconds]
    (t0, s0) = recent[0]
    if step >= total_steps:
        return Completion(percent, 0.0)
    if step <= s0 or now <= t0:
        return Completion(percent, None)
    return Completion(percent, (total_steps - step) * (now - t0) / (step - s0))


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


class ProgressPoller:
    """The operator's progress timer: every progress interval, reads rank 0's metrics of each Running job and patches
    status.progress. Reads run on their own threads, so unreachable pod IPs never starve
    reconciliations; `call` runs a blocking API call off the event loop."""

    def __init__(self, cache, kube, call, config: OperatorConfig):
        self.cache, self.kube, self.call, self.config = cache, kube, call, config
        self._threads = ThreadPoolExecutor(max_workers=4, thread_name_prefix="scrape")
        self._reads: dict = {}  # job key -> [(monotonic time, step)] of the rate window

    def forget(self, key) -> None:
        self._reads.pop(key, None)

    def _with_completion(self, key, obj: dict, progress: ProgressStatus) -> ProgressStatus:
        total = (obj.get("spec") or {}).get("steps") or LongContextJobSpec.model_fields["steps"].default
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
            (p for p in self.cache.generation_pods(key, status.get("workloadGeneration") or 0) if pod_rank(p) == 0),
            None,
        )
        port = ((obj.get("spec") or {}).get("metrics") or {}).get("port", 9400)
        source = metrics_source(
            obj["metadata"].get("annotations") or {}, rank0["status"].get("podIP") if rank0 else None, port, self.config
        )
        if source.refused:
            log.warning("%s/%s: %s", *key, source.refused)
        return source.url

    async def scrape(self, key) -> None:
        obj = self.cache.jobs_of.get(key)
        if obj is None or (obj.get("status") or {}).get("phase") != "Running":
            return
        url = self.rank0_url(key, obj)
        if url is None:
            return
        try:
            text = await asyncio.get_running_loop().run_in_executor(self._threads, fetch_metrics, url)
            progress = parse_progress(text, timestamp(datetime.now(UTC)))
        except MetricsUnreadable as e:
            log.debug("%s/%s: metrics at %s unreadable: %s", *key, url, e)
            return
        if progress is not None:
            progress = self._with_completion(key, obj, progress)
            updated = await self.call(
                self.kube.patch_status, *key, {"progress": progress.model_dump(by_alias=True, exclude_none=True)}
            )
            self.cache.put_job(updated, deleted=False)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.config.progress_interval_seconds)
            keys = [k for k, o in self.cache.jobs_of.items() if (o.get("status") or {}).get("phase") == "Running"]
            results = await asyncio.gather(*(self.scrape(k) for k in keys), return_exceptions=True)
            for key, result in zip(keys, results, strict=False):
                if isinstance(result, Exception):
                    log.warning("%s/%s: progress not updated: %s", *key, result)
