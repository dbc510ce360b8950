"""Straggler attribution as pure decisions over the tracked ranks (stall.py): a rank whose last
step time is above the gang's median by more than a threshold, read after read for a sustained
window, is a straggler. `mark_slow` updates since when each rank has been slow; `stragglers`
names those slow for the whole window, with their pod and node.
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


@dataclass(frozen=True)
class Straggler:
    rank: int
    pod: str
    node: str | None
    step_seconds: float
    median_seconds: float

    def describe(self) -> str:
        where = f"pod {self.pod}" + (f" on node {self.node}" if self.node else "")
        return (
            f"rank {self.rank} ({where}) takes {self.step_seconds:.3g}s a step, "
            f"{100 * (self.step_seconds / self.median_seconds - 1):.0f}% above "
            f"the gang's median {self.median_seconds:.3g}s"
        )


def _timed(tracks: dict[int, RankTrack]) -> list[RankTrack]:
    return [t for t in tracks.values() if t.answering and t.step_seconds is not None and t.step_seconds > 0]


def mark_slow(tracks: dict[int, RankTrack], now: float, bounds: StragglerBounds) -> dict[int, RankTrack]:
    """`tracks` with each answering rank's slow_since set at `now` when it turned slow, kept while
    it stays slow, and cleared when it is not; a rank not answering keeps its mark (no new read)."""
    timed = _timed(tracks)
    if len(timed) < 2:
        return tracks
    limit = median(t.step_seconds for t in timed) * (1 + bounds.slower_percent / 100)
    out = dict(tracks)
    for t in timed:
        slow = t.step_seconds > limit
        out[t.rank] = replace(t, slow_since=(t.slow_since if t.slow_since is not None else now) if slow else None)
    return out


def stragglers(tracks: dict[int, RankTrack], now: float, bounds: StragglerBounds) -> tuple[Straggler, ...]:
    """The ranks slow for at least the window at `now`, lowest rank first."""
    timed = _timed(tracks)
    if len(timed) < 2:
        return ()
    middle = median(t.step_seconds for t in timed)
    return tuple(
        Straggler(t.rank, t.pod, t.node, t.step_seconds, middle)
        for t in sorted(timed, key=lambda t: t.rank)
        if t.slow_since is not None and now - t.slow_since >= bounds.window_seconds
    )
