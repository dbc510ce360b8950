"""Fault injection for the end-to-end tests, off unless a job's env turns it on: a rank that never
joins the rendezvous (podenv.FAULT_FREEZE_IN_RENDEZVOUS). It stops itself with SIGSTOP, as a frozen
process would, but only once its health metrics have been read in the rendezvous phase, so the
reader (the operator's watchdog) has seen where it stopped.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Mapping

from .contract.metrics import TrainMetrics
from .contract.podenv import FAULT_FREEZE_IN_RENDEZVOUS


class _Reads:
    """A collector that yields nothing and counts the reads of the registry it is in."""

    def __init__(self, wanted: int):
        self.count, self.wanted, self.done = 0, wanted, threading.Event()

    def describe(self) -> list:
        return []

    def collect(self) -> list:
        self.count += 1
        if self.count >= self.wanted:
            self.done.set()
        return []


def freeze_in_rendezvous(metrics: TrainMetrics, process_id: int, environ: Mapping[str, str] = os.environ) -> None:
    """When the env names `process_id`: wait until `metrics` are read a second time (the first
    read's answer has left: one reader reads a rank once per interval), then stop this process."""
    if environ.get(FAULT_FREEZE_IN_RENDEZVOUS) != str(process_id):
        return
    reads = _Reads(2)
    metrics.registry.register(reads)
    reads.done.wait()
    os.kill(os.getpid(), signal.SIGSTOP)
