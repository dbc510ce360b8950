"""Straggler attribution as pure decisions over the tracked ranks (stall.py): a rank whose own
speed is below the gang's median by more than a threshold, read after read for a sustained window,
is a straggler. `mark_slow` updates since when each rank has been slow; `stragglers` names those
slow for the whole window, with their pod and node.

The step times of a synchronous gang are equalised by its collectives (every rank waits for the
slowest), so the ranks are compared by what each does alone, where every answering rank exports
it: its last compute probe's time (longctx_trainer.probe: fixed work, no collective; a rank with a
slow device stands out by the threshold's percentage), its data path's time for a batch (a rank
with slow input stands out when it spends more than the threshold's percentage of the gang's step
time above the median) and its link probe's time (longctx_trainer.probe.LinkProbe: pairwise
exchanges with other nodes; a rank whose node's network link is slow stands out by the threshold's
percentage). A rank slow by any is slow; it is named by the measure it is furthest above, but
never by the link probe where the compute probe finds it slow (a starved host slows its exchanges
too). Otherwise (a
trainer that exports none, a rank before its first probe) the ranks are compared by their last
step time, which still names a rank slow before its first collective.
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
DATA = "data"
"""Ranks compared by their data path's time for a batch, against the gang's step time."""
LINK = "link"
"""Ranks compared by their link probe's time."""
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
    """What was compared: PROBE, DATA, LINK or STEP."""
    step_seconds: float | None = None
    """The gang's median step time (DATA: the time the extra data time is a share of)."""

    def describe(self) -> str:
        where = f"pod {self.pod}" + (f" on node {self.node}" if self.node else "")
        if self.measure == DATA and self.step_seconds:
            extra = self.seconds - self.median_seconds
            return (
                f"rank {self.rank} ({where}) takes {self.seconds:.3g}s for its data, {extra:.3g}s more than "
                f"the gang's median {self.median_seconds:.3g}s, {100 * extra / self.step_seconds:.0f}% of a "
                f"{self.step_seconds:.3g}s step"
            )
        what = {PROBE: "for the compute probe", LINK: "for the link probe (its exchanges with other nodes)"}.get(
            self.measure, "a step"
        )
        return (
            f"rank {self.rank} ({where}) takes {self.seconds:.3g}s {what}, "
            f"{100 * (self.seconds / self.median_seconds - 1):.0f}% above "
            f"the gang's median {self.median_seconds:.3g}s"
        )


@dataclass(frozen=True)
class Measure:
    """One way of comparing the ranks: each timed rank's time of it, by rank, and the time above
    which a rank is slow by it."""

    name: str
    seconds: dict[int, float]
    median_seconds: float
    limit: float
    step_seconds: float | None = None

    def excess(self, seconds: float) -> float:
        """How far above its limit a time is, as a share of what the limit allows over the median."""
        allowed = self.limit - self.median_seconds
        return (seconds - self.median_seconds) / allowed if allowed > 0 else float("inf")


def measures(tracks: dict[int, RankTrack], bounds: StragglerBounds) -> list[Measure]:
    """What the ranks are compared by (PROBE, DATA and LINK where every answering rank exports them,
    else STEP), each with at least two timed ranks."""
    answering = [t for t in tracks.values() if t.answering]

    def timed(value) -> dict[int, float]:
        return {t.rank: v for t in answering if (v := value(t)) is not None and v > 0}

    def relative(name: str, seconds: dict[int, float]) -> Measure:
        middle = median(seconds.values())
        return Measure(name, seconds, middle, middle * (1 + bounds.slower_percent / 100))

    out = []
    probes = timed(lambda t: t.probe_seconds)
    if len(probes) == len(answering) >= 2:
        out.append(relative(PROBE, probes))
    data, steps = timed(lambda t: t.data_seconds), timed(lambda t: t.step_seconds)
    if len(data) == len(answering) >= 2 and steps:
        step = median(steps.values())
        middle = median(data.values())
        out.append(Measure(DATA, data, middle, middle + step * bounds.slower_percent / 100, step))
    links = timed(lambda t: t.link_seconds)
    if len(links) == len(answering) >= 2:
        out.append(relative(LINK, links))
    if out:
        return out
    return [relative(STEP, steps)] if len(steps) >= 2 else []


def mark_slow(tracks: dict[int, RankTrack], now: float, bounds: StragglerBounds) -> dict[int, RankTrack]:
    """`tracks` with each timed rank's slow_since set at `now` when it turned slow (by any measure),
    kept while it stays slow, and cleared when it is not; a rank not answering keeps its mark (no
    new read)."""
    compared = measures(tracks, bounds)
    if not compared:
        return tracks
    slow = {rank for m in compared for rank, seconds in m.seconds.items() if seconds > m.limit}
    out = dict(tracks)
    for rank in {rank for m in compared for rank in m.seconds}:
        t = tracks[rank]
        out[rank] = replace(t, slow_since=(t.slow_since if t.slow_since is not None else now) if rank in slow else None)
    return out


def stragglers(tracks: dict[int, RankTrack], now: float, bounds: StragglerBounds) -> tuple[Straggler, ...]:
    """The ranks slow for at least the window at `now`, lowest rank first, each by the measure it
    is furthest above its limit by; never by the link probe where the compute probe finds it slow."""
    out = []
    compared = measures(tracks, bounds)
    for rank in sorted({rank for m in compared for rank in m.seconds}):
        t = tracks[rank]
        if t.slow_since is None or now - t.slow_since < bounds.window_seconds:
            continue
        timed = [m for m in compared if rank in m.seconds]
        if any(m.name == PROBE and m.seconds[rank] > m.limit for m in timed):
            timed = [m for m in timed if m.name != LINK]  # its own slowness slowed its exchanges too
        m = max(timed, key=lambda m: m.excess(m.seconds[rank]))
        out.append(Straggler(t.rank, t.pod, t.node, m.seconds[rank], m.median_seconds, m.name, m.step_seconds))
    return tuple(out)
