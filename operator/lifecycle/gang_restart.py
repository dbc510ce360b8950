"""Gang restart: any failed rank takes the whole gang down, which restarts after a backoff as the
next generation (from the last checkpoint), or fails after restartPolicy.maxRestarts."""

from __future__ import annotations

from .. import conditions, preemption
from ..api.spec import LongContextJobSpec
from ..api.status import RESTARTING
from ..reasons import Reason
from .decision import Decision, DeleteWorkload
from .draft import Draft

BACKOFF_FLOOR_SECONDS = 1.0
BACKOFF_CAP_SECONDS = 600.0


def restart_backoff(spec: LongContextJobSpec, restarts: int) -> float:
    """Wait before the generation of gang restart `restarts` (1, 2, ...): restartPolicy.backoffSeconds
    (at least BACKOFF_FLOOR_SECONDS), doubling with each restart up to BACKOFF_CAP_SECONDS (or the
    base, if longer), so that a gang that fails at once cannot churn pods as fast as they start."""
    base = max(float(spec.restart_policy.backoff_seconds), BACKOFF_FLOOR_SECONDS)
    return min(base * 2.0 ** min(max(restarts - 1, 0), 32), max(base, BACKOFF_CAP_SECONDS))


def backoff_left(n: Draft, spec: LongContextJobSpec) -> float:
    """Seconds of the current restart's backoff still to wait (0 or less once it is over)."""
    since = n.condition_since(conditions.RESTARTING) or n.now
    return restart_backoff(spec, n.status.restarts) - (n.now - since).total_seconds()


def gang_failed(
    n: Draft, spec: LongContextJobSpec, generation: int, uid: str | None, reason: Reason, message: str
) -> Decision:
    """Any failed rank takes the whole gang down: delete its Job (`uid`; None when it was never
    created), then restart it or give up."""
    if uid is not None:
        n.actions.append(DeleteWorkload(generation, uid, broken=True))
    n.set(current_workload=None, last_restart=preemption.restart_record(reason, message, n.now, n.checkpoint_step))
    n.clear(conditions.RENDEZVOUS, reason, message)
    if n.status.restarts >= spec.restart_policy.max_restarts:
        return n.fail(
            reason,
            f"{message} (after {n.status.restarts} gang restarts, "
            f"restartPolicy.maxRestarts is {spec.restart_policy.max_restarts})",
        )
    n.set(phase=RESTARTING, reason=reason, message=message, restarts=n.status.restarts + 1)
    n.clear(conditions.RUNNING, reason, message)
    n.restart_clock(conditions.RESTARTING)
    n.condition(conditions.RESTARTING, True, reason, f"gang restart {n.status.restarts}: {message}")
    return n.decision(requeue_after=restart_backoff(spec, n.status.restarts))
