"""The health contract of a trainer process: the names of the metrics that say where each rank is
(its phase), that it is alive (a heartbeat with its last step) and how long its steps take. Plain
data, no JAX or Prometheus import: the trainers export these names (metrics.py) and the operator
reads them from every rank (contract/exposition.py) to find a hung gang and a straggler.
"""

from __future__ import annotations

from collections import deque
from statistics import median
from typing import Literal

Phase = Literal["starting", "rendezvous", "compiling", "training", "checkpointing"]
PHASES: tuple[Phase, ...] = ("starting", "rendezvous", "compiling", "training", "checkpointing")
"""In the order a rank goes through them; a rank is in exactly one (its gauge is 1, the others 0)."""
STARTUP_PHASES: tuple[Phase, ...] = ("starting", "rendezvous", "compiling")
"""Before the first step: bounded by the startup bound, not by the step time."""

PHASE = "longctx_train_phase"
HEARTBEAT = "longctx_train_heartbeat_timestamp_seconds"
HEARTBEAT_STEP = "longctx_train_heartbeat_step"
STEP_SECONDS = "longctx_train_last_step_seconds"
PROBE_SECONDS = "longctx_train_probe_seconds"
"""How long this process's own devices took for the compute probe (longctx_trainer.probe): a fixed
computation with no collective, so, unlike the step time, which a synchronous gang's collectives
equalise, it tells a rank with a slow device from the ranks that wait for it."""
DATA_SECONDS = "longctx_train_data_seconds"
"""How long this process's data path took to read and lay out a batch (the median of its last
PROBE_KEPT batches): a rank whose input is slow (its node's volume or network) holds the whole gang
at the next collective, where every rank's step time becomes the slowest's; only this names it."""
HEALTH_METRICS = (PHASE, HEARTBEAT, HEARTBEAT_STEP, STEP_SECONDS, PROBE_SECONDS, DATA_SECONDS)

PROBE_WORK: dict[str, tuple[int, int, str]] = {"cpu": (512, 8, "float32")}
"""(matrix side, matmuls, dtype) of the compute probe by device platform; both trainers run it."""
PROBE_ACCELERATOR_WORK: tuple[int, int, str] = (4096, 8, "bfloat16")
"""The probe's work on a GPU (or any platform PROBE_WORK does not name): about 1.1 TFLOP."""
PROBE_KEPT = 5
"""Probes whose median is the exported probe time: one probe hit by a burst of other work (on the
fast rank as well as the slow one) moves it little."""


def probe_work(platform: str) -> tuple[int, int, str]:
    """(matrix side, matmuls, dtype name) of the compute probe on devices of `platform`."""
    return PROBE_WORK.get(platform, PROBE_ACCELERATOR_WORK)


class RecentTimes:
    """The last PROBE_KEPT times of one measure (the compute probe, the data path); `add` returns
    their median, the time a trainer exports."""

    def __init__(self) -> None:
        self._kept: deque[float] = deque(maxlen=PROBE_KEPT)

    def add(self, seconds: float) -> float:
        self._kept.append(seconds)
        return median(self._kept)
