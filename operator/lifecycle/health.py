"""The watchdog's verdict on a Running gang (stall.py, straggler.py): a hung gang restarts, counted
in stallRestarts against restartPolicy.maxStallRestarts apart from failures; a straggler sets the
Straggler condition and restarts the gang only when restartPolicy.onStraggler asks."""

from __future__ import annotations

from .. import conditions, preemption, reasons
from ..api.spec import LongContextJobSpec
from ..api.status import RESTARTING
from ..reasons import Reason
from ..stall import GangHealth
from .decision import Decision, DeleteWorkload
from .draft import Draft
from .gang_restart import restart_backoff


def gang_stalled(
    n: Draft, spec: LongContextJobSpec, generation: int, uid: str, reason: Reason, message: str
) -> Decision:
    """A hung gang (or a straggler, with restartPolicy.onStraggler): delete the generation and start
    the next from the last checkpoint, counted in stallRestarts against maxStallRestarts, apart from
    failures."""
    n.actions.append(DeleteWorkload(generation, uid, broken=True))
    n.set(current_workload=None, last_restart=preemption.restart_record(reason, message, n.now, n.checkpoint_step))
    n.condition(conditions.STALLED, True, reason, message)
    n.clear(conditions.RENDEZVOUS, reason, message)
    n.clear(conditions.RUNNING, reason, message)
    limit = spec.restart_policy.max_stall_restarts
    if n.status.stall_restarts >= limit:
        return n.fail(
            reason,
            f"{message} (after {n.status.stall_restarts} stall restarts, restartPolicy.maxStallRestarts is {limit})",
        )
    n.set(phase=RESTARTING, reason=reason, message=message, stall_restarts=n.status.stall_restarts + 1)
    n.restart_clock(conditions.RESTARTING)
    n.condition(conditions.RESTARTING, True, reason, f"stall restart {n.status.stall_restarts}: {message}")
    return n.decision(requeue_after=restart_backoff(spec, n.status.restarts + n.status.stall_restarts))


def running_health(
    n: Draft, spec: LongContextJobSpec, generation: int, uid: str, health: GangHealth | None
) -> Decision | None:
    """The watchdog's verdict on a Running generation: a stall restarts the gang (when
    hangDetection.enabled); stragglers set the Straggler condition and restart it only when
    restartPolicy.onStraggler asks. None: carry on."""
    if health is None or health.generation != generation:
        return None
    if health.stall is not None and spec.hang_detection.enabled:
        return gang_stalled(n, spec, generation, uid, reasons.STALLED, health.stall.describe())
    if health.stragglers:
        message = "; ".join(s.describe() for s in health.stragglers)
        n.condition(conditions.STRAGGLER, True, reasons.STRAGGLER_DETECTED, message)
        if spec.restart_policy.on_straggler:
            return gang_stalled(n, spec, generation, uid, reasons.STRAGGLER_DETECTED, f"straggler: {message}")
    else:
        n.clear(
            conditions.STRAGGLER, reasons.NO_STRAGGLER, "every rank's probe (or step) time is near the gang's median"
        )
    return None
