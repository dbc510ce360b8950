"""When a decided status is written: now, a little later with the changes after it, or not at all.

Every status patch is a request the API server serves while it starts the gang's pods, and most
of a starting gang's decisions change one thing: status.workers, the counts of ranks Ready,
failed and succeeded, which follow every pod event. So a status equal to the one last written is
not written again, and a change of the counts alone waits up to WORKERS_WRITE_SECONDS for the
changes after it, one patch carrying them all. Anything else (phase, reason, message, a condition
and the Event its transition makes, the generation, a decision with actions, which the status
must precede) is written at once, with the counts that waited. The counts are derived from the
observation on every decision (lifecycle/decide.py), so one that waited is never lost: the next
decision, due when it must be written at the latest, finds it again.
"""

from __future__ import annotations

from .api.status import LongContextJobStatus
from .lifecycle.decision import Decision

WORKERS_WRITE_SECONDS = 2.0
"""The longest a change of status.workers alone waits to be written."""


def write_delay(
    written: LongContextJobStatus, decision: Decision, waiting_since: float | None, now: float
) -> float | None:
    """Seconds from `now` until `decision`'s status is due to be written over `written` (the status
    as last written or watched): None when there is nothing to write, 0.0 to write it now.
    `waiting_since`: when a change of the counts alone was first left unwritten (None: none was)."""
    new = decision.status
    if new == written:
        return None
    if decision.actions or decision.events or new.model_copy(update={"workers": written.workers}) != written:
        return 0.0
    return max(0.0, (now if waiting_since is None else waiting_since) + WORKERS_WRITE_SECONDS - now)
