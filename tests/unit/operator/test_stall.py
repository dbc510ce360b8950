"""operator/stall.py: hang detection from recorded rounds of reads of every rank (times in seconds)."""

from longctx_operator.stall import RankRead, StallBounds, stall, track

BOUNDS = StallBounds(step_factor=10, floor_seconds=60, startup_seconds=600, planned_step_seconds=2.0)


def reads(phases, steps=None, seconds=1.0):
    """One round: rank i in phases[i] (None: did not answer) at steps[i]."""
    steps = steps or [0] * len(phases)
    return [
        RankRead(i, f"job-g1-{i}", f"node-{i}", p, s, seconds if p == "training" else None)
        for i, (p, s) in enumerate(zip(phases, steps, strict=True))
    ]


def replay(rounds, every=10.0):
    """The tracks after `rounds` read `every` seconds apart from t=0, and the time of the last."""
    tracks, now = {}, 0.0
    for i, round_ in enumerate(rounds):
        now = i * every
        tracks = track(tracks, round_, now)
    return tracks, now


def test_a_training_gang_that_steps_is_never_stalled():
    tracks, now = replay([reads(["training"] * 3, [s] * 3) for s in range(100)])
    assert stall(tracks, now, BOUNDS) is None


def test_a_stopped_rank_is_named_once_no_rank_advanced_for_the_bound():
    """Rank 1 stops (SIGSTOP: its endpoint no longer answers) at step 5; the others wait in the
    collective at step 5. The bound is max(10 x 1 s median step, 60 s floor) = 60 s."""
    moving = [reads(["training"] * 3, [s] * 3) for s in range(6)]  # t = 0..50, last step at t=50
    stuck = [reads(["training", None, "training"], [5, 5, 5]) for _ in range(6)]  # t = 60..110
    tracks, now = replay(moving + stuck[:5])  # t = 100: 50 s without a step
    assert stall(tracks, now, BOUNDS) is None
    tracks, now = replay(moving + stuck)  # t = 110: 60 s
    verdict = stall(tracks, now, BOUNDS)
    assert verdict is not None and not verdict.startup
    assert [t.rank for t in verdict.ranks] == [1] and verdict.bound == 60
    assert "rank 1 (pod job-g1-1, phase training, step 5, not answering)" in verdict.describe()


def test_the_bound_grows_with_the_step_time():
    slow = StallBounds(10, 60, 600)
    rounds = [reads(["training"] * 2, [1, 1], seconds=30.0)] * 30  # 30 s steps: bound 300 s
    tracks, _ = replay(rounds)
    assert stall(tracks, 290, slow) is None and stall(tracks, 300, slow).bound == 300


def test_all_ranks_answering_but_stuck_names_the_rank_behind():
    rounds = [reads(["training"] * 3, [7, 6, 7])] * 8
    tracks, now = replay(rounds)
    assert [t.rank for t in stall(tracks, now, BOUNDS).ranks] == [1]


def test_a_rank_that_never_joins_the_rendezvous_is_named_in_phase_rendezvous():
    """Rank 2 stopped before it joined: the others wait in the rendezvous; past the startup bound
    (600 s, longer than 10 planned 2 s steps) the gang is stalled, rank 2 named."""
    first = reads(["rendezvous"] * 3)
    then = reads(["rendezvous", "rendezvous", None])
    tracks, _ = replay([first] + [then] * 59)  # t = 590
    assert stall(tracks, 590, BOUNDS) is None
    verdict = stall(tracks, 600, BOUNDS)
    assert verdict.startup and [(t.rank, t.phase) for t in verdict.ranks] == [(2, "rendezvous")]
    assert "has not reached its first step" in verdict.describe()


def test_a_gang_compiling_is_judged_by_the_startup_bound_not_the_step_bound():
    tracks, _ = replay([reads(["compiling"] * 2)] * 30)
    assert stall(tracks, 300, BOUNDS) is None


def test_a_rank_behind_in_phase_is_named_when_all_answer():
    tracks, _ = replay([reads(["compiling", "rendezvous", "compiling"])] * 3)
    assert [t.rank for t in stall(tracks, 600, BOUNDS).ranks] == [1]


def test_a_gang_that_never_served_health_metrics_is_never_judged():
    tracks, _ = replay([reads([None, None])] * 3)
    assert stall(tracks, 10**6, BOUNDS) is None


def test_an_in_place_restart_starts_the_startup_bound_again():
    """The gang trains past the startup bound (600 s), then its trainers restart in place inside the
    same pods: their endpoints go silent, then serve rendezvous and compiling. The startup bound
    counts from their return, not from the generation's first read."""
    training = [reads(["training"] * 2, [s] * 2) for s in range(70)]  # t = 0..690
    restarting = [reads([None, None])] + [reads(["rendezvous", "compiling"])] * 3  # t = 700..730
    tracks, now = replay(training + restarting)
    assert stall(tracks, now, BOUNDS) is None
    stuck = [reads(["rendezvous", "compiling"])] * 60  # t = 740..1330: 600 s since the return at 710
    tracks, now = replay(training + restarting + stuck)
    verdict = stall(tracks, now, BOUNDS)
    assert verdict is not None and verdict.startup and verdict.bound == 600
