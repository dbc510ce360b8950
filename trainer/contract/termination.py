"""How a preempted trainer ends, for the trainers that end so (the JAX one, trainer/preemption.py,
and the PyTorch one) and the operator that reads it (operator/preemption.py, observe.py): no JAX,
torch or Kubernetes import."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

TERMINATION_LOG = Path("/dev/termination-log")

PREEMPTED_EXIT_CODE = 85
"""A trainer stopped by SIGTERM that saved a checkpoint first exits with this code, never 0: an
Indexed Job counts an index whose pod exits 0 as done for good, so a preempted gang would read as
completed and a resumed Job would not restart those indexes. The operator renders a pod failure
policy that ignores this code (no failure counted; the Job controller replaces the pod) and reads
the step from the termination message (`PREEMPTED_MESSAGE`)."""

PREEMPTED_MESSAGE = "preempted: checkpoint at step {step}"
"""The container's termination message after such a save (/dev/termination-log)."""


class Preempted(Exception):
    """Raised by the training loop after the preemption checkpoint of `step` is written."""

    def __init__(self, step: int):
        super().__init__(f"preempted at step {step}")
        self.step = step


class SigtermNotice:
    """Catches SIGTERM from now on: `received` turns True instead of the process ending."""

    def __init__(self):
        self.received = False
        signal.signal(signal.SIGTERM, self._notice)

    def _notice(self, signum, frame) -> None:
        self.received = True


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
