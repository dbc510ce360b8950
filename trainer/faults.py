"""Fault injection for the tests, off unless a job's env turns it on: a rank that never joins the
rendezvous (podenv.FAULT_FREEZE_IN_RENDEZVOUS). It stops itself with SIGSTOP, as a frozen process
would, but only once its health metrics have been read in the rendezvous phase, so the reader (the
operator's watchdog) has seen where it stopped. And a rank that crashes once after a step
(podenv.FAULT_EXIT_AT_STEP), for in-place restart (trainer/inplace.py).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping

from .contract.metrics import TrainMetrics
from .contract.podenv import FAULT_EXIT_AT_STEP, FAULT_FREEZE_IN_RENDEZVOUS, RESTART_EPOCH

FAULT_EXIT_CODE = 3
"""The exit code of a rank that FAULT_EXIT_AT_STEP crashes."""


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


def exit_at_step(process_id: int, environ: Mapping[str, str] = os.environ) -> Callable[[int], None] | None:
    """When the env names `process_id` (`<process id>:<step>`) and this is its launcher's first
    epoch: a call after each step that ends the process at once (no cleanup, as a crash would)
    after that step; otherwise None. A malformed value is refused (ValueError)."""
    value = environ.get(FAULT_EXIT_AT_STEP)
    if not value or environ.get(RESTART_EPOCH, "0") != "0":
        return None
    rank, sep, step = value.partition(":")
    if not sep or not rank.isdigit() or not step.isdigit():
        raise ValueError(f"{FAULT_EXIT_AT_STEP} must be <process id>:<step>, not {value!r}")
    if int(rank) != process_id:
        return None

    def fault(done: int) -> None:
        if done == int(step):
            print(
                f"longctx_trainer: {FAULT_EXIT_AT_STEP}: exiting {FAULT_EXIT_CODE} after step {done}", file=sys.stderr
            )
            sys.stderr.flush()
            os._exit(FAULT_EXIT_CODE)

    return fault
