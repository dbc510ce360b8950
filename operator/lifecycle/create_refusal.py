"""A generation's workload that is not there: refused by the API server (kept trying until the
startup timeout), its name taken by an object this job does not own (the job fails), or not seen
yet (created again: create-or-get)."""

from __future__ import annotations

from .. import conditions, reasons
from ..api.spec import LongContextJobSpec
from ..layout import ResolvedLayout
from .decision import DELETE_WAIT_SECONDS, CreateWorkload, Decision
from .draft import Draft
from .gang_restart import gang_failed
from .startup import startup_left


def create_refused(n: Draft, spec: LongContextJobSpec, generation: int, error: str) -> Decision:
    """The API server refuses the generation's workload (quota, policy webhook, ...): say so in the
    status and keep trying until the startup timeout, which then counts as a failed start."""
    n.condition(conditions.WORKLOAD_CREATED, False, reasons.WORKLOAD_CREATE_FAILED, error)
    left = startup_left(n, spec, n.condition_since(conditions.WORKLOAD_CREATED, "False") or n.now)
    if left < 0:
        return gang_failed(
            n,
            spec,
            generation,
            None,
            reasons.STARTUP_TIMEOUT,
            f"startup timeout: the workload was not created within "
            f"{spec.scheduling.startup_timeout_seconds}s (scheduling.startupTimeoutSeconds): {error}",
        )
    n.set(reason=reasons.WORKLOAD_CREATE_FAILED, message=error)
    n.actions.append(CreateWorkload(generation, ResolvedLayout.from_status(n.status.layout, spec)))
    return n.decision(requeue_after=max(0.5, left + 0.5))


def name_taken(n: Draft, error: str) -> Decision:
    """A child's name belongs to an object this job does not own: the job fails at once with the
    reason, and nothing is deleted (nothing of that generation is this job's)."""
    n.set(current_workload=None)
    n.condition(conditions.WORKLOAD_CREATED, False, reasons.NAME_TAKEN, error)
    return n.fail(reasons.NAME_TAKEN, error)


def create_again(n: Draft, spec: LongContextJobSpec, generation: int) -> Decision:
    """Not seen yet (just created) or removed by someone else: create-or-get it again."""
    n.actions.append(CreateWorkload(generation, ResolvedLayout.from_status(n.status.layout, spec)))
    return n.decision(requeue_after=DELETE_WAIT_SECONDS)
