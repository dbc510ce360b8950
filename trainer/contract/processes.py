"""Waiting on a group of processes that must all succeed: the in-pod launcher's (launch.py) and
`longctx run`'s (operator/localrun.py). No JAX, torch or Kubernetes import."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterable

WOKEN = (-1, 0)
"""first_failure's answer when `wake` said to stop waiting."""


def first_failure(
    procs: list[subprocess.Popen],
    poll_seconds: float = 0.2,
    stuck: Callable[[], Iterable[int]] = tuple,
    wake: Callable[[], bool] = lambda: False,
) -> tuple[int, int] | None:
    """Wait until every process has exited 0 (None) or one has failed: (its index, its exit code),
    or `wake` turns True while none has (WOKEN). Kills the processes `stuck` names (their exit is
    then a failure)."""
    while True:
        codes = [p.poll() for p in procs]
        for index, code in enumerate(codes):
            if code not in (None, 0):
                return index, code
        if all(code == 0 for code in codes):
            return None
        if wake():
            return WOKEN
        for index in stuck():
            print(
                f"longctx_trainer.launch: process {index} has not moved since the SIGTERM and cannot "
                "save (a peer it waits for is gone?); killing it",
                file=sys.stderr,
                flush=True,
            )
            procs[index].kill()
        time.sleep(poll_seconds)
