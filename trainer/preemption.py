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

from jax.experimental import multihost_utils

from .contract.termination import SigtermNotice


class Preemption:
    def __init__(self, processes: int):
        self.processes = processes
        self.notice = SigtermNotice() if processes == 1 else None

    def reached(self, step: int) -> bool:
        """True when every process is to save at `step` and stop (call once per step, every process)."""
        if self.notice is not None:
            return self.notice.received
        return multihost_utils.reached_preemption_sync_point(step)
