"""scheduling.admission kueue: the Job is created suspended in the LocalQueue and Kueue admits it
(unsuspends it), holds it back (its reason shown in Kueue's words) or evicts it (suspends it
again: the ranks save, and the same Job resumes when Kueue admits it again)."""

from __future__ import annotations

from .. import conditions, preemption, reasons
from ..api.spec import LongContextJobSpec
from ..api.status import ADMITTED, PENDING
from ..observe import KueueVerdict
from .decision import Decision
from .draft import Draft


def queued_message(spec: LongContextJobSpec) -> str:
    """The Admitted=False message of a generation just created, suspended, for Kueue to admit."""
    return f"Job created suspended in LocalQueue {spec.scheduling.queue_name}; Kueue admits it"


def suspended(n: Draft, spec: LongContextJobSpec, kueue: KueueVerdict | None) -> Decision:
    """The generation's Job is suspended: Kueue has not admitted it (yet, or again) or took it back."""
    if n.holds(conditions.ADMITTED):
        return evicted(n, kueue)
    if kueue is not None:  # show why, in Kueue's words
        evicted_before = n.status.reason == reasons.EVICTED_BY_KUEUE or kueue.evicted
        reason = reasons.EVICTED_BY_KUEUE if evicted_before else reasons.QUEUED_IN_KUEUE
        message = f"Job suspended in LocalQueue {spec.scheduling.queue_name}; Kueue: {kueue.describe()}"
        n.set(reason=reason, message=message)
        n.condition(conditions.ADMITTED, False, reason, message)
    return n.decision()


def evicted(n: Draft, kueue: KueueVerdict | None) -> Decision:
    """Kueue suspended an admitted Job (preemption by a higher-priority workload, waitForPodsReady,
    quota reclaim): the Job controller stops every pod, whose ranks save one step on SIGTERM. The
    same Job stays, suspended, so Kueue's requeue backoff and limit apply to its Workload; when
    Kueue admits it again its pods start and resume from that checkpoint. Not a failure: no
    restart is counted, no generation made. The message carries Kueue's own reason (Preempted,
    PodsReadyTimeout, ...) when its Workload says it."""
    why = f"evicted it: {kueue.describe()}" if kueue is not None and kueue.evicted else "preempted or evicted it"
    message = (
        f"Kueue suspended Job {n.status.current_workload} ({why}); its ranks save a checkpoint and "
        "stop, and the same Job resumes from it when Kueue admits it again"
    )
    n.set(
        phase=PENDING,
        reason=reasons.EVICTED_BY_KUEUE,
        message=message,
        last_restart=preemption.restart_record(reasons.EVICTED_BY_KUEUE, message, n.now, n.checkpoint_step),
    )
    n.clear(conditions.RUNNING, reasons.EVICTED_BY_KUEUE, message)
    n.clear(conditions.RENDEZVOUS, reasons.EVICTED_BY_KUEUE, message)
    n.condition(conditions.ADMITTED, False, reasons.EVICTED_BY_KUEUE, message)
    return n.decision()


def unsuspended(n: Draft) -> None:
    """Kueue unsuspended the Job: it is admitted."""
    n.condition(conditions.ADMITTED, True, reasons.ADMITTED_BY_KUEUE, "Kueue unsuspended the Job")
    if n.status.phase == PENDING:
        n.set(phase=ADMITTED, reason=reasons.ADMITTED_BY_KUEUE, message="Kueue unsuspended the Job")
