"""When a decided status is written: now, a little later with the changes after it, or not at all.

Every status patch is a request the API server serves while it starts the gang's pods, and most
of a starting gang's decisions change one thing: status.workers, the counts of ranks Ready,
failed and succeeded, which follow every pod event. So a status equal to the one last written is
not written again, and a change of the counts alone waits up to WORKERS_WRITE_SECONDS for the
changes after it, one patch carrying them all. So does the move to phase Starting (some ranks
Running, not all: no condition, no Event), which the move to Running mostly follows within that
time: one patch for both. Anything else (another phase, reason or message, a condition and the
Event its transition makes, the generation, a decision with actions, which the status must
precede) is written at once, with what waited. The counts and the phase are derived from the
observation on every decision (lifecycle/decide.py), so a change that waited is never lost: the
next decision, due when it must be written at the latest, finds it again.
"""

from __future__ import annotations

from .api.status import STARTING, LongContextJobStatus
from .lifecycle.decision import Decision
from .reasons import RANKS_STARTING

WORKERS_WRITE_SECONDS = 2.0
"""The longest a change of status.workers alone, or the move to phase Starting, waits to be written."""


def write_delay(
    written: LongContextJobStatus, decision: Decision, waiting_since: float | None, now: float
) -> float | None:
    """Seconds from `now` until `decision`'s status is due to be written over `written` (the status
    as last written or watched): None when there is nothing to write, 0.0 to write it now.
    `waiting_since`: when a change of the counts alone was first left unwritten (None: none was)."""
    new = decision.status
    if new == written:
        return None
    if decision.actions or decision.events or _without_progress(new, written) != written:
        return 0.0
    return max(0.0, (now if waiting_since is None else waiting_since) + WORKERS_WRITE_SECONDS - now)


def _without_progress(new: LongContextJobStatus, written: LongContextJobStatus) -> LongContextJobStatus:
    """`new` less the changes that may wait: the counts, and a move to phase Starting as ranks come up
    (not one for a preemption: lifecycle/preempted.py)."""
    kept = {"workers": written.workers}
    if new.phase == STARTING and new.reason == RANKS_STARTING and written.phase != STARTING:
        kept |= {"phase": written.phase, "reason": written.reason, "message": written.message}
    return new.model_copy(update=kept)
