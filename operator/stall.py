"""Hang detection as pure decisions over reads of every rank's health metrics (longctx_trainer.contract.health).

The watchdog (watchdog.py) reads each rank's phase, step and step time every interval; `track`
folds one round of reads into what is known of each rank (when its step or phase last moved);
`stall` says whether the gang is hung: none of its ranks has advanced for the training bound
(max(k x the expected step time, a floor)), or it has not reached its first step within the
startup bound (rendezvous and compiling; max(the spec's startup bound, k x the step time)),
counted from the generation's first read or, after the ranks' trainers restarted in place, from
the last rank seen back in a startup phase. The
verdict names the ranks that stopped: those whose endpoint no longer answers (a stopped process
serves nothing), else those behind the others (a lower step, an earlier phase), else all of them.
Times are seconds on one monotonic clock.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from statistics import median

from longctx_trainer.contract.health import PHASES, STARTUP_PHASES


@dataclass(frozen=True)
class RankRead:
    """One read of one rank: `phase` None when the endpoint did not answer (or serves no health
    metrics yet)."""

    rank: int
    pod: str
    node: str | None
    phase: str | None
    step: int | None = None
    step_seconds: float | None = None
    probe_seconds: float | None = None
    """Its last compute probe (longctx_trainer.probe), when its trainer runs one."""
    data_seconds: float | None = None
    """Its data path's time for a batch, when its trainer exports it."""
    link_seconds: float | None = None
    """Its link probe's time (longctx_trainer.probe.LinkProbe), when its trainer runs one."""


@dataclass(frozen=True)
class RankTrack:
    """What is known of one rank from the reads of its generation so far."""

    rank: int
    pod: str
    node: str | None
    phase: str | None
    """The last phase it reported."""
    step: int | None
    step_seconds: float | None
    answering: bool
    """Its endpoint answered the last read."""
    first_seen: float
    moved: float
    """When its step or phase last changed (or it was first read)."""
    slow_since: float | None = None
    """Since when it is above the straggler threshold (straggler.py)."""
    probe_seconds: float | None = None
    """Its last compute probe's time."""
    data_seconds: float | None = None
    """Its data path's last time for a batch."""
    link_seconds: float | None = None
    """Its last link probe's time."""
    restarted: float | None = None
    """When it was last seen back in a startup phase after training (its trainer restarted in
    place, inside the same pod: trainer/inplace.py); None if never."""


def track(tracks: dict[int, RankTrack], reads: list[RankRead], now: float) -> dict[int, RankTrack]:
    """`tracks` after one round of `reads` at `now`; a rank not answering keeps its last phase and step."""
    out = dict(tracks)
    for read in reads:
        old = tracks.get(read.rank)
        if old is None:
            out[read.rank] = RankTrack(
                read.rank,
                read.pod,
                read.node,
                read.phase,
                read.step,
                read.step_seconds,
                read.phase is not None,
                now,
                now,
                probe_seconds=read.probe_seconds,
                data_seconds=read.data_seconds,
                link_seconds=read.link_seconds,
            )
            continue
        if read.phase is None:
            out[read.rank] = replace(old, answering=False)
            continue
        moved = read.phase != old.phase or read.step != old.step
        back = old.phase is not None and old.phase not in STARTUP_PHASES and read.phase in STARTUP_PHASES
        out[read.rank] = replace(
            old,
            pod=read.pod,
            node=read.node,
            phase=read.phase,
            step=read.step,
            step_seconds=read.step_seconds if read.step_seconds is not None else old.step_seconds,
            probe_seconds=read.probe_seconds if read.probe_seconds is not None else old.probe_seconds,
            data_seconds=read.data_seconds if read.data_seconds is not None else old.data_seconds,
            link_seconds=read.link_seconds if read.link_seconds is not None else old.link_seconds,
            answering=True,
            moved=now if moved else old.moved,
            restarted=now if back else old.restarted,
        )
    return out


@dataclass(frozen=True)
class StallBounds:
    step_factor: float
    """k: the gang may go k expected step times without a step."""
    floor_seconds: float
    """The training bound is never shorter."""
    startup_seconds: float
    """Rendezvous and compiling together may last this long (or k step times, if longer)."""
    planned_step_seconds: float | None = None
    """The planner's estimate of a step, used until a step has been timed."""

    def expected_step(self, tracks: dict[int, RankTrack]) -> float | None:
        """The median of the ranks' last step times, else the plan's estimate."""
        timed = [t.step_seconds for t in tracks.values() if t.step_seconds is not None and t.step_seconds >= 0]
        return median(timed) if timed else self.planned_step_seconds

    def training(self, tracks: dict[int, RankTrack]) -> float:
        step = self.expected_step(tracks)
        return max(self.step_factor * step, self.floor_seconds) if step else self.floor_seconds

    def startup(self, tracks: dict[int, RankTrack]) -> float:
        step = self.expected_step(tracks)
        return max(self.step_factor * step, self.startup_seconds) if step else self.startup_seconds


@dataclass(frozen=True)
class Stall:
    ranks: tuple[RankTrack, ...]
    """The ranks that stopped, lowest first."""
    seconds: float
    """How long the gang has not advanced."""
    bound: float
    startup: bool
    """Stuck before the first step (rendezvous or compiling)."""

    def describe(self) -> str:
        who = ", ".join(
            f"rank {t.rank} (pod {t.pod}, phase {t.phase or 'unknown'}"
            + (f", step {t.step}" if t.step is not None and not self.startup else "")
            + ("" if t.answering else ", not answering")
            + ")"
            for t in self.ranks
        )
        what = "has not reached its first step" if self.startup else "has made no step"
        return f"the gang {what} for {self.seconds:.0f}s (bound {self.bound:.0f}s): stopped {who}"


def _phase_order(phase: str | None) -> int:
    return PHASES.index(phase) if phase in PHASES else -1


def _stopped(tracks: dict[int, RankTrack]) -> tuple[RankTrack, ...]:
    ranks = sorted(tracks.values(), key=lambda t: t.rank)
    silent = [t for t in ranks if not t.answering]
    if silent:
        return tuple(silent)
    behind = min((_phase_order(t.phase), t.step or 0) for t in ranks)
    return tuple(t for t in ranks if (_phase_order(t.phase), t.step or 0) == behind)


def stall(tracks: dict[int, RankTrack], now: float, bounds: StallBounds) -> Stall | None:
    """The gang's stall at `now`, or None while it advances, or while no rank has ever served its
    health metrics (a trainer without them, or endpoints the operator cannot reach: not a hang)."""
    if all(t.phase is None for t in tracks.values()):
        return None
    started = any(t.phase is not None and t.phase not in STARTUP_PHASES for t in tracks.values())
    if started:
        since, bound = max(t.moved for t in tracks.values()), bounds.training(tracks)
    else:
        # from the generation's first read, or from the last in-place restart of its trainers
        restarts = [t.restarted for t in tracks.values() if t.restarted is not None]
        since, bound = max([min(t.first_seen for t in tracks.values()), *restarts]), bounds.startup(tracks)
    if now - since < bound:
        return None
    return Stall(_stopped(tracks), now - since, bound, startup=not started)


@dataclass(frozen=True)
class GangHealth:
    """What the watchdog last concluded of one generation, for lifecycle.decide."""

    generation: int
    stall: Stall | None = None
    stragglers: tuple = ()
    """straggler.Straggler of the ranks slow for the whole window."""
