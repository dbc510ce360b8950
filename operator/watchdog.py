"""The watchdog: reads every rank's health metrics (longctx_trainer.contract.health) of each Running job and
keeps the verdicts of stall.py and straggler.py for lifecycle.decide.

Every rank's exporter is the job's image, read as the progress reads rank 0 (progress.py): each
read is bounded by scrape.py's deadline and size cap, the text is scanned by contract/exposition.py's
bounded scanner on a small thread pool, each job is read by its own task with at most
READS_PER_JOB reads at once, and a rank whose endpoint does not answer is a rank that did not
answer, nothing more. Pod IPs come from the watched pods (no extra API call); the metrics-url
annotation is rank 0's only, so ranks are read at their pod IPs. When a verdict changes (a stall, a
different set of stragglers) the job is queued, so the reconciler decides at once.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from longctx_trainer.contract.exposition import MetricsUnreadable, health_values
from longctx_trainer.contract.health import (
    DATA_SECONDS,
    HEARTBEAT_STEP,
    LINK_SECONDS,
    PHASE,
    PROBE_SECONDS,
    STEP_SECONDS,
)

from .api.spec import LongContextJobSpec
from .cache import Key
from .config import OperatorConfig
from .jobtasks import RunningJobTasks
from .observe import pod_rank, serving
from .scrape import Response, fetch_metrics
from .stall import GangHealth, RankRead, RankTrack, StallBounds, stall, track
from .straggler import StragglerBounds, mark_slow, stragglers

log = logging.getLogger("longctx.operator")

READS_PER_JOB = 32
"""Endpoints of one job read at once; a larger gang is read in waves."""
MAX_STEP_SECONDS = 86400.0
"""A longer step time is not believed (a value from a broken or hostile exporter)."""


def bounds(spec: LongContextJobSpec, status: dict) -> tuple[StallBounds, StragglerBounds]:
    """The job's thresholds; the plan's step estimate from status.layout (tokens per step over its
    estimated tokens per second), when the planner made one."""
    estimate = (status.get("layout") or {}).get("estimatedTokensPerSecond")
    hang, slow = spec.hang_detection, spec.straggler_detection
    planned = spec.batch_tokens / estimate if estimate else None
    return (
        StallBounds(hang.step_factor, hang.floor_seconds, hang.startup_seconds, planned),
        StragglerBounds(slow.slower_percent, slow.window_seconds),
    )


def targets(pods: list[dict], processes_per_pod: int, port: int) -> list[tuple[int, str, str | None, str | None]]:
    """(rank, pod, node, URL or None while the pod has no IP) of every process of the generation's
    serving pods (observe.serving): process l of pod i is rank i * processes_per_pod + l on port + l."""
    out = []
    for pod in pods:
        index = pod_rank(pod)
        if index is None or not serving(pod):
            continue
        ip = (pod.get("status") or {}).get("podIP")
        host = f"[{ip}]" if ip and ":" in ip else ip
        for local in range(processes_per_pod):
            url = f"http://{host}:{port + local}/metrics" if host else None
            out.append((index * processes_per_pod + local, pod["metadata"]["name"], pod["spec"].get("nodeName"), url))
    return sorted(out)


def rank_read(rank: int, pod: str, node: str | None, body: bytes | None) -> RankRead:
    """One rank's read from its exposition `body` (None: the endpoint did not answer). Values the
    exporter could not mean (a negative or non-finite step, step, probe, data or link time) are dropped."""
    values = health_values(body) if body is not None else {}
    step = values.get(HEARTBEAT_STEP)

    def seconds(name: str) -> float | None:
        value = values.get(name)
        return value if isinstance(value, float) and 0 < value <= MAX_STEP_SECONDS else None

    return RankRead(
        rank,
        pod,
        node,
        values.get(PHASE),
        int(step) if isinstance(step, float) and 0 <= step <= 2.0**62 else None,
        seconds(STEP_SECONDS),
        seconds(PROBE_SECONDS),
        seconds(DATA_SECONDS),
        seconds(LINK_SECONDS),
    )


def _shape(health: GangHealth | None) -> tuple:
    """What a decision depends on: a change of it queues the job."""
    if health is None:
        return ()
    stalled = tuple(t.rank for t in health.stall.ranks) if health.stall else None
    return (health.generation, stalled, tuple(s.rank for s in health.stragglers))


class Watchdog(RunningJobTasks):
    """One task per Running job reads all its ranks every progress interval."""

    task_name = "watchdog"

    def __init__(self, cache, config: OperatorConfig, changed: Callable[[Key], None]):
        super().__init__(cache, config)
        self.changed = changed
        self._threads = ThreadPoolExecutor(max_workers=2, thread_name_prefix="health")
        self._tracks: dict[Key, tuple[int, dict[int, RankTrack]]] = {}
        self._verdicts: dict[Key, GangHealth] = {}

    def verdict(self, key: Key) -> GangHealth | None:
        return self._verdicts.get(key)

    def forget(self, key: Key) -> None:
        self._tracks.pop(key, None)
        self._verdicts.pop(key, None)
        self._cancel(key)

    def stop(self) -> None:
        self._threads.shutdown(wait=False, cancel_futures=True)

    async def _read(self, url: str | None, limit: asyncio.Semaphore) -> Response | None:
        if url is None:
            return None
        async with limit:
            try:
                return await fetch_metrics(url)
            except MetricsUnreadable:
                return None

    async def check(self, key: Key) -> None:
        """One round: read every rank of the job's current generation and update the verdict."""
        obj = self._running(key)
        if obj is None:
            return
        status = obj.get("status") or {}
        generation = status.get("workloadGeneration") or 0
        spec = LongContextJobSpec.model_validate(obj.get("spec") or {})
        processes = (status.get("layout") or {}).get("processesPerNode") or 1
        ranks = targets(self.cache.generation_pods(key, generation), processes, spec.metrics.port)
        if not ranks:
            return
        limit = asyncio.Semaphore(READS_PER_JOB)
        responses = await asyncio.gather(*(self._read(url, limit) for *_, url in ranks))
        loop = asyncio.get_running_loop()

        def parse() -> list[RankRead]:
            reads = []
            for (rank, pod, node, _), response in zip(ranks, responses, strict=True):
                try:
                    reads.append(rank_read(rank, pod, node, response.payload() if response else None))
                except MetricsUnreadable:
                    reads.append(rank_read(rank, pod, node, None))
            return reads

        reads = await loop.run_in_executor(self._threads, parse)
        now = time.monotonic()
        old_generation, tracks = self._tracks.get(key, (generation, {}))
        if old_generation != generation:
            tracks = {}
        hang, slow = bounds(spec, status)
        tracks = mark_slow(track(tracks, reads, now), now, slow)
        self._tracks[key] = (generation, tracks)
        health = GangHealth(generation, stall(tracks, now, hang), stragglers(tracks, now, slow))
        before = self._verdicts.get(key)
        self._verdicts[key] = health
        if _shape(before) != _shape(health):
            self.changed(key)

    async def follow(self, key: Key) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.progress_interval_seconds
        try:
            await asyncio.sleep(random.uniform(0, interval))
            while self._running(key) is not None:
                started = loop.time()
                try:
                    await self.check(key)
                except Exception as e:  # noqa: BLE001 - one job's round must not stop its reads
                    log.warning("%s/%s: ranks not read: %s", *key, e)
                await asyncio.sleep(max(0.0, started + interval - loop.time()))
        finally:
            self._ended(key)
