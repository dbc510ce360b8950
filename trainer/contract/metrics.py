"""Prometheus exporter of one trainer process (labels job_name and rank, bounded cardinality)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from .config import TrainerConfig
from .health import (
    DATA_SECONDS,
    HEARTBEAT,
    HEARTBEAT_STEP,
    LINK_SECONDS,
    PHASE,
    PHASES,
    PROBE_SECONDS,
    STEP_SECONDS,
    Phase,
)
from .podenv import LOCAL_PROCESS_ID

# The names the operator reads for status.progress (contract/exposition.py).
STEP = "longctx_train_step"
TOKENS_PER_SECOND = "longctx_train_tokens_per_second"
LOSS = "longctx_train_loss"
MFU = "longctx_train_mfu_ratio"
LAST_CHECKPOINT = "longctx_train_last_checkpoint_step"
LAST_CHECKPOINT_TIME = "longctx_train_last_checkpoint_timestamp_seconds"
RESUMED_FROM = "longctx_train_resumed_from_step"
RING_CROSS_HOPS = "longctx_train_ring_cross_hops"
IN_PLACE_RESTARTS = "longctx_train_in_place_restarts"
MFU_CONVENTION = "causal"
"""The FLOPs-per-token convention of the progress MFU (causal attention counted once)."""
MFU_PEAK = "bf16"
"""The peak of the progress MFU; a trainer without the peak label reports against it."""

STEP_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)


def package_version() -> str:
    try:
        return version("longctx")
    except PackageNotFoundError:
        return "unknown"


class TrainMetrics:
    """The trainer's metrics in their own registry; `serve` exposes them over HTTP."""

    def __init__(self, job: str, rank: int, registry: CollectorRegistry | None = None):
        self.registry = registry or CollectorRegistry()
        labels = ("job_name", "rank")
        r = self.registry

        def make(kind, name, doc, extra=(), **kw):
            return kind(name, doc, labels + extra, registry=r, **kw)

        self.tokens = make(Counter, "longctx_train_tokens", "Tokens trained on.")
        self.steps = make(Counter, "longctx_train_steps", "Optimizer steps taken by this process.")
        self.step = make(Gauge, STEP, "Current absolute training step.")
        self.tokens_per_second = make(Gauge, TOKENS_PER_SECOND, "Global tokens per second of the last step.")
        self.step_duration = make(
            Histogram, "longctx_train_step_duration_seconds", "Wall time of one training step.", buckets=STEP_BUCKETS
        )
        self.loss = make(Gauge, LOSS, "Training loss of the last step.")
        self.mfu = make(
            Gauge,
            MFU,
            "Model FLOPs utilisation (0..1) by FLOPs-per-token convention (causal, full) and peak (bf16, fp8).",
            ("convention", "peak"),
        )
        self.checkpoint_duration = make(
            Histogram,
            "longctx_train_checkpoint_duration_seconds",
            "Wall time of one checkpoint save.",
            buckets=STEP_BUCKETS,
        )
        self.last_checkpoint_step = make(Gauge, LAST_CHECKPOINT, "Step of the latest checkpoint.")
        self.last_checkpoint_time = make(Gauge, LAST_CHECKPOINT_TIME, "Unix time of the latest checkpoint.")
        self.resumed_from_step = make(
            Gauge, RESUMED_FROM, "Checkpoint step this process resumed from (0: from scratch)."
        )
        self.in_place_restarts = make(
            Gauge, IN_PLACE_RESTARTS, "In-place restarts of the gang's trainers before this process started."
        )
        self.build_info = make(
            Gauge,
            "longctx_train_build_info",
            "Trainer build and layout.",
            ("version", "model", "data", "context", "tensor", "attention", "sequence_length", "backend"),
        )
        self.phase = make(
            Gauge,
            PHASE,
            "1 for the phase this process is in (starting to checkpointing), 0 for the others.",
            ("phase",),
        )
        self.heartbeat = make(Gauge, HEARTBEAT, "Unix time of this process's last phase change or finished step.")
        self.heartbeat_step = make(Gauge, HEARTBEAT_STEP, "Absolute step at this process's last heartbeat.")
        self.last_step_seconds = make(Gauge, STEP_SECONDS, "Wall time of this process's last training step.")
        self.probe_seconds = make(
            Gauge, PROBE_SECONDS, "Wall time of this process's last compute probe: fixed work, no collective."
        )
        self.data_seconds = make(
            Gauge, DATA_SECONDS, "Wall time of this process's data path for a batch (median of its last few)."
        )
        self.link_seconds = make(
            Gauge, LINK_SECONDS, "Wall time of this process's fastest round of the link probe, with another node."
        )
        self.ring_cross_hops = make(
            Gauge,
            RING_CROSS_HOPS,
            "Most hops one context ring of the mesh makes across each topology level (zone, topology key, node).",
            ("level",),
        )
        self._labels = {"job_name": job, "rank": str(rank)}
        self._step = 0
        self.enter("starting")

    def serve(self, port: int) -> None:
        """Serves the metrics on `port`; a port in use raises OSError naming it."""
        try:
            start_http_server(port, registry=self.registry)
        except OSError as error:
            raise OSError(f"metrics port {port}: {error.strerror or error}") from None

    @classmethod
    def serving(cls, config: TrainerConfig, rank: int) -> TrainMetrics:
        """The process's metrics, served (when metrics.port is set, plus the pod's local process id)
        from before the rendezvous, so the operator sees a rank that never joins; OSError when the
        port is taken."""
        metrics = cls(config.metrics.job, rank)
        if config.metrics.port:
            metrics.serve(config.metrics.port + int(os.environ.get(LOCAL_PROCESS_ID, "0")))
        return metrics

    def describe(self, config: TrainerConfig, backend: str) -> None:
        p = config.parallelism
        self.build_info.labels(
            **self._labels,
            version=package_version(),
            model=config.model.preset or "custom",
            data=str(p.data),
            context=str(p.context),
            tensor=str(p.tensor),
            attention=p.attention,
            sequence_length=str(config.sequence_length),
            backend=backend,
        ).set(1)

    def observe_ring(self, hops: dict[str, int]) -> None:
        """The ring order's hops across each topology level the ranks know (trainer/topology.py)."""
        for level, count in hops.items():
            self.ring_cross_hops.labels(**self._labels, level=level).set(count)

    def enter(self, phase: Phase) -> None:
        """This process is now in `phase` (a heartbeat)."""
        for name in PHASES:
            self.phase.labels(**self._labels, phase=name).set(1 if name == phase else 0)
        self._beat()

    def _beat(self) -> None:
        self.heartbeat_step.labels(**self._labels).set(self._step)
        self.heartbeat.labels(**self._labels).set(time.time())

    def observe_step(
        self, step: int, tokens: int, seconds: float, loss: float, mfu: dict[tuple[str, str], float]
    ) -> None:
        """Record one finished step; `step` is the absolute step count after it; `mfu` is keyed by
        (convention, peak)."""
        self.tokens.labels(**self._labels).inc(tokens)
        self.steps.labels(**self._labels).inc()
        self.step.labels(**self._labels).set(step)
        self.tokens_per_second.labels(**self._labels).set(tokens / seconds)
        self.step_duration.labels(**self._labels).observe(seconds)
        self.loss.labels(**self._labels).set(loss)
        for (convention, peak), value in mfu.items():
            self.mfu.labels(**self._labels, convention=convention, peak=peak).set(value)
        self.last_step_seconds.labels(**self._labels).set(seconds)
        self._step = step
        self._beat()

    def observe_probe(self, seconds: float) -> None:
        """This process's devices took `seconds` for the compute probe (longctx_trainer.probe)."""
        self.probe_seconds.labels(**self._labels).set(seconds)

    def observe_link(self, seconds: float) -> None:
        """This process's link probe took `seconds` (the median of its last few; longctx_trainer.probe)."""
        self.link_seconds.labels(**self._labels).set(seconds)

    def observe_data(self, seconds: float) -> None:
        """This process's data path took `seconds` for a batch (the median of its last few)."""
        self.data_seconds.labels(**self._labels).set(seconds)

    def observe_in_place_restarts(self, epoch: str | None) -> None:
        """The launcher's epoch (podenv.RESTART_EPOCH: its in-place restarts so far), where it gave one."""
        if epoch is not None and epoch.isascii() and epoch.isdigit():
            self.in_place_restarts.labels(**self._labels).set(int(epoch))

    def observe_resume(self, step: int) -> None:
        self._step = step
        self.step.labels(**self._labels).set(step)
        self.resumed_from_step.labels(**self._labels).set(step)
        self.last_checkpoint_step.labels(**self._labels).set(step)

    def checkpoint(self, step: int, save: Callable[[], object]) -> float:
        """Runs `save` in the checkpointing phase, records its wall time as `step`'s checkpoint,
        returns to training and returns the seconds it took (both trainers save this way)."""
        self.enter("checkpointing")
        begin = time.perf_counter()
        save()
        seconds = time.perf_counter() - begin
        self.observe_checkpoint(step, seconds)
        self.enter("training")
        return seconds

    def observe_checkpoint(self, step: int, seconds: float) -> None:
        self.checkpoint_duration.labels(**self._labels).observe(seconds)
        self.last_checkpoint_step.labels(**self._labels).set(step)
        self.last_checkpoint_time.labels(**self._labels).set(time.time())
