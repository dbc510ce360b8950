"""Straggler attribution as pure decisions over the tracked ranks (stall.py): a rank whose own
speed is below the gang's median by more than a threshold, read after read for a sustained window,
is a straggler. `mark_slow` updates since when each rank has been slow; `stragglers` names those
slow for the whole window, with their pod and node.

A rank's speed is its last compute probe's time (longctx_trainer.probe) when every answering rank
exports one: fixed work with no collective, so a rank with a slow device stands out, where the
step times of a synchronous gang are equalised by its collectives (every rank waits for the
slowest). Otherwise (a trainer without the probe, a rank before its first probe) the ranks are
compared by their last step time, which still names a rank slow before its first collective.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from .stall import RankTrack


@dataclass(frozen=True)
class StragglerBounds:
    slower_percent: float
    """A rank is slow when its step time exceeds the median by more than this percentage."""
    window_seconds: float
    """... and has been for this long."""


PROBE = "probe"
"""Ranks compared by their compute probe's time."""
STEP = "step"
"""Ranks compared by their step time."""


@dataclass(frozen=True)
class Straggler:
    rank: int
    pod: str
    node: str | None
    seconds: float
    """Its time of the measure."""
    median_seconds: float
    measure: str = STEP
    """What was compared: PROBE or STEP."""

    def describe(self) -> str:
        where = f"pod {self.pod}" + (f" on node {self.node}" if self.node else "")
        what = "for the compute probe" if self.measure == PROBE else "a step"
        return (
            f"rank {self.rank} ({where}) takes {self.seconds:.3g}s {what}, "
            f"{100 * (self.seconds / self.median_seconds - 1):.0f}% above "
            f"the gang's median {self.median_seconds:.3g}s"
        )


def measured(tracks: dict[int, RankTrack]) -> tuple[str, list[tuple[RankTrack, float]]]:
    """What the ranks are compared by (PROBE when every answering rank has a probe time, else
    STEP) and each answering rank that has a time of it, with that time."""
    answering = [t for t in tracks.values() if t.answering]
    if answering and all(t.probe_seconds is not None and t.probe_seconds > 0 for t in answering):
        return PROBE, [(t, t.probe_seconds) for t in answering]
    return STEP, [(t, t.step_seconds) for t in answering if t.step_seconds is not None and t.step_seconds > 0]


def mark_slow(tracks: dict[int, RankTrack], now: float, bounds: StragglerBounds) -> dict[int, RankTrack]:
    """`tracks` with each answering rank's slow_since set at `now` when it turned slow, kept while
    it stays slow, and cleared when it is not; a rank not answering keeps its mark (no new read)."""
    _, timed = measured(tracks)
    if len(timed) < 2:
        return tracks
    limit = median(seconds for _, seconds in timed) * (1 + bounds.slower_percent / 100)
    out = dict(tracks)
    for t, seconds in timed:
        slow = seconds > limit
        out[t.rank] = replace(t, slow_since=(t.slow_since if t.slow_since is not None else now) if slow else None)
    return out


def stragglers(tracks: dict[int, RankTrack], now: float, bounds: StragglerBounds) -> tuple[Straggler, ...]:
    """The ranks slow for at least the window at `now`, lowest rank first."""
    measure, timed = measured(tracks)
    if len(timed) < 2:
        return ()
    middle = median(seconds for _, seconds in timed)
    return tuple(
        Straggler(t.rank, t.pod, t.node, seconds, middle, measure)
        for t, seconds in sorted(timed, key=lambda pair: pair[0].rank)
        if t.slow_since is not None and now - t.slow_since >= bounds.window_seconds
    )
