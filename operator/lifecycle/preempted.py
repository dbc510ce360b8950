"""A preempted rank: the same Job replaces the pods, which resume from the step every rank saved."""

from __future__ import annotations

from .. import conditions, preemption, reasons
from ..api.spec import LongContextJobSpec
from ..api.status import STARTING
from ..observe import RankPreemption
from .decision import Decision
from .draft import Draft


def preempted(n: Draft, spec: LongContextJobSpec, rank: RankPreemption) -> Decision:
    """A rank got SIGTERM (its pod deleted, its node drained): every rank saved one step and ended
    PREEMPTED_EXIT_CODE, which the Job's pod failure policy ignores, so the same Job replaces the
    pods and they resume from that step. No restart is counted; the startup timeout runs again
    from the preemption."""
    message = rank.describe()
    n.set(
        phase=STARTING,
        reason=reasons.PREEMPTED,
        message=message,
        last_restart=preemption.restart_record(
            reasons.PREEMPTED, message, rank.finished or n.now, rank.step if rank.step >= 0 else n.checkpoint_step
        ),
    )
    n.clear(conditions.RUNNING, reasons.PREEMPTED, message)
    n.clear(conditions.RENDEZVOUS, reasons.PREEMPTED, message)
    return n.decision(requeue_after=float(spec.scheduling.startup_timeout_seconds))
