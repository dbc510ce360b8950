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
LINK_SECONDS = "longctx_train_link_probe_seconds"
"""How long this process's exchanges with processes on other nodes took in the link probe
(longctx_trainer.probe.LinkProbe): the fastest of its rounds, each with another node. A node whose
network link is slow is slow in every round, its partners only in their round with it, so only it
stands out; its step time, and every rank's compute probe, do not."""
HEALTH_METRICS = (PHASE, HEARTBEAT, HEARTBEAT_STEP, STEP_SECONDS, PROBE_SECONDS, DATA_SECONDS, LINK_SECONDS)

PROBE_WORK: dict[str, tuple[int, int, str]] = {"cpu": (512, 8, "float32")}
"""(matrix side, matmuls, dtype) of the compute probe by device platform; both trainers run it."""
PROBE_ACCELERATOR_WORK: tuple[int, int, str] = (4096, 8, "bfloat16")
"""The probe's work on a GPU (or any platform PROBE_WORK does not name): about 1.1 TFLOP."""
PROBE_KEPT = 5
"""Probes whose median is the exported probe time: one probe hit by a burst of other work (on the
fast rank as well as the slow one) moves it little."""


LINK_PROBE_BYTES: dict[str, int] = {"cpu": 4 << 20}
"""Bytes each device sends its partner in a round of the link probe, by device platform: enough
that a round's time is the link's bandwidth more than its latency."""
LINK_PROBE_ACCELERATOR_BYTES = 64 << 20
"""... on a GPU (or any platform LINK_PROBE_BYTES does not name): about 1.3 ms a round at 50 GB/s."""
LINK_PROBE_ROUNDS = 3
"""Rounds of the link probe: each node meets this many others (fewer in a smaller gang). With one
slow node, every other node has a round with a node that is not it, as long as it has two rounds."""


def link_probe_bytes(platform: str) -> int:
    return LINK_PROBE_BYTES.get(platform, LINK_PROBE_ACCELERATOR_BYTES)


def link_rounds(nodes: int, rounds: int = LINK_PROBE_ROUNDS) -> list[list[tuple[int, int]]]:
    """The first `rounds` rounds of a round-robin tournament of `nodes` (the circle method: node 0
    stays, the others turn), each a list of disjoint pairs (a, b), a < b; with an odd number of
    nodes one sits out each round. Every pair meets at most once. Empty below three nodes: with
    two, both are slow in their only round, so the probe could not tell which one's link is."""
    if nodes < 3:
        return []
    seats = list(range(nodes)) + ([None] if nodes % 2 else [])
    out = []
    for _ in range(min(rounds, len(seats) - 1)):
        half = len(seats) // 2
        pairs = [(seats[i], seats[-1 - i]) for i in range(half)]
        out.append(sorted(tuple(sorted(pair)) for pair in pairs if None not in pair))
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return out


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
