"""status.progress.inPlaceRestarts and its Event: the in-place restarts of the current generation
(restartPolicy.inPlace, trainer/inplace.py) as the job's status shows them.

When the launchers restart the trainers inside the running pods no pod fails, so the operator's
watches see nothing; the one witness is rank 0's `longctx_train_in_place_restarts` gauge, read
with the progress (progress.py). That value comes from the job author's pod, so, like every
progress value, it is shown only when it could be true: a whole number of at least 0 (NaN,
infinities, a negative or fractional value, or no sample at all leave it out of the status), at
most the generation's budget (restartPolicy.maxInPlaceRestarts, the most the launchers make; 0
without inPlace), a larger one capped as step is at spec.steps. Each read that shows a higher count
than the status did posts one Event, so a job gets at most one such Event per progress read; a
lower count (a new generation's trainers start again at 0) is shown and posts none. Everything
here is pure: the progress poller reads, patches and posts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .api.spec import RestartPolicySpec
from .lifecycle.decision import Event
from .reasons import RESTARTED_IN_PLACE


@dataclass(frozen=True)
class InPlaceRestarts:
    """The count the status shows after one read of rank 0, and the Events to post for it."""

    count: int | None
    events: tuple[Event, ...] = ()


def in_place_budget(spec: dict) -> int:
    """The in-place restarts a generation may make under the job's spec (as stored: read leniently,
    a value of the wrong type taken as its default)."""
    policy = spec.get("restartPolicy") if isinstance(spec.get("restartPolicy"), dict) else {}
    if policy.get("inPlace") is not True:
        return 0
    limit = policy.get("maxInPlaceRestarts")
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        return limit
    return RestartPolicySpec.model_fields["max_in_place_restarts"].default


def shown_in_place_restarts(status: dict) -> int | None:
    """The count the job's status shows now (None when absent or not a count)."""
    progress = status.get("progress") if isinstance(status.get("progress"), dict) else {}
    shown = progress.get("inPlaceRestarts")
    return shown if isinstance(shown, int) and not isinstance(shown, bool) and shown >= 0 else None


def in_place_restarts(shown: int | None, reported: float | None, budget: int, generation: int) -> InPlaceRestarts:
    """The count to show after a read of rank 0 that served `reported` (its gauge's value, None
    when it served none) where the status showed `shown`, with an Event when it rose."""
    if reported is None or not math.isfinite(reported) or reported < 0 or reported != math.floor(reported):
        return InPlaceRestarts(None)
    count = min(int(reported), max(budget, 0))
    if count <= (shown or 0):
        return InPlaceRestarts(count)
    message = (
        f"the trainers were restarted in place, inside the same pods: {count} in-place "
        f"restart{'s' if count != 1 else ''} in generation {generation} "
        f"(restartPolicy.maxInPlaceRestarts is {budget})"
    )
    return InPlaceRestarts(count, (Event("Warning", RESTARTED_IN_PLACE, message),))
