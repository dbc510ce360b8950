"""Save on preemption: every rank agrees on one step to checkpoint at after a SIGTERM reaches any.

With several processes the agreement is JAX's preemption sync manager, which
`jax.distributed.initialize` starts on the coordination service: it catches SIGTERM in whichever
process receives it, tells every process through the service, and `reached(step)` turns True on
all of them at the same step (one past the largest step any process had reported), so a rank that
alone was signalled (a deleted pod) still makes the whole gang save the same step. Every process
must call `reached` once per step from the same first step, which the training loop does. A single
process has no coordination service: its own SIGTERM handler is the notice, and the step it
reaches next is the one to save.

SIGINT (Ctrl-C) keeps the default disposition and ends a process at once (see __main__.py).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

from jax.experimental import multihost_utils

from .termination import PREEMPTED_EXIT_CODE, PREEMPTED_MESSAGE

TERMINATION_LOG = Path("/dev/termination-log")


class Preempted(Exception):
    """Raised by the training loop after the preemption checkpoint of `step` is written."""

    def __init__(self, step: int):
        super().__init__(f"preempted at step {step}")
        self.step = step


class Preemption:
    def __init__(self, processes: int):
        self.processes = processes
        self.noticed = False
        if processes == 1:
            signal.signal(signal.SIGTERM, self._notice)

    def _notice(self, signum, frame) -> None:
        self.noticed = True

    def reached(self, step: int) -> bool:
        """True when every process is to save at `step` and stop (call once per step, every process)."""
        if self.processes == 1:
            return self.noticed
        return multihost_utils.reached_preemption_sync_point(step)


def exit_preempted(step: int, termination_log: Path = TERMINATION_LOG) -> None:
    """Leave with PREEMPTED_EXIT_CODE, telling Kubernetes the saved step in the termination message
    (best effort: outside a pod the file is not there or not writable)."""
    message = PREEMPTED_MESSAGE.format(step=step)
    print(f"longctx_trainer: {message}; exiting {PREEMPTED_EXIT_CODE}", file=sys.stderr, flush=True)
    try:
        termination_log.write_text(message)
    except OSError:
        pass
    sys.stdout.flush()
    sys.exit(PREEMPTED_EXIT_CODE)
