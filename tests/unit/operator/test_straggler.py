"""operator/straggler.py: straggler attribution from recorded per-rank step, probe, data and link times."""

from longctx_operator.stall import RankRead, track
from longctx_operator.straggler import StragglerBounds, mark_slow, stragglers

BOUNDS = StragglerBounds(slower_percent=50, window_seconds=60)


def replay(step_seconds_per_round, every=10.0, probes=None, data=None, links=None):
    """Rounds of reads `every` seconds apart; `probes`, `data`, `links`: every round's probe, data
    and link probe times by rank (None: none)."""
    tracks, now = {}, 0.0
    for i, times in enumerate(step_seconds_per_round):
        now = i * every
        probe = probes or [None] * len(times)
        fetch = data or [None] * len(times)
        link = links or [None] * len(times)
        round_ = [
            RankRead(r, f"job-g1-{r}", f"node-{r}", "training", i, s, p, d, k)
            for r, (s, p, d, k) in enumerate(zip(times, probe, fetch, link, strict=True))
        ]
        tracks = mark_slow(track(tracks, round_, now), now, BOUNDS)
    return tracks, now


def test_a_rank_slower_than_the_median_for_the_window_is_named_with_pod_and_node():
    tracks, now = replay([[1.0, 1.0, 1.6, 1.0]] * 7)  # 60 % above the median 1.0, from t=0 to t=60
    [slow] = stragglers(tracks, now, BOUNDS)
    assert (slow.rank, slow.pod, slow.node) == (2, "job-g1-2", "node-2")
    assert slow.describe() == "rank 2 (pod job-g1-2 on node node-2) takes 1.6s a step, 60% above the gang's median 1s"


def test_not_for_the_whole_window_or_not_by_the_threshold_is_no_straggler():
    assert stragglers(*replay([[1.0, 1.0, 1.6]] * 6), BOUNDS) == ()  # 50 s of 60
    assert stragglers(*replay([[1.0, 1.0, 1.45]] * 20), BOUNDS) == ()  # 45 %: under the threshold
    # slow, then once not: the window starts again
    tracks, now = replay([[1.0, 1.0, 1.6]] * 5 + [[1.0, 1.0, 1.0]] + [[1.0, 1.0, 1.6]] * 5)
    assert stragglers(tracks, now, BOUNDS) == ()


def test_the_other_ranks_are_not_named():
    tracks, now = replay([[1.0, 3.0, 1.0, 1.1]] * 10)
    assert [s.rank for s in stragglers(tracks, now, BOUNDS)] == [1]


def test_a_slow_device_is_named_by_its_probe_when_the_collectives_equalise_the_step_times():
    even = [[2.0, 2.0, 2.0]] * 7  # a synchronous gang: every rank waits for rank 1's device
    tracks, now = replay(even, probes=[0.05, 0.15, 0.06])
    [slow] = stragglers(tracks, now, BOUNDS)
    assert slow.rank == 1
    assert slow.describe() == (
        "rank 1 (pod job-g1-1 on node node-1) takes 0.15s for the compute probe, 150% above the gang's median 0.06s"
    )
    assert stragglers(*replay(even, probes=[0.1, 0.145, 0.1]), BOUNDS) == ()  # 45 %: under the threshold
    assert stragglers(*replay(even, probes=[0.1, 0.155, 0.1]), BOUNDS) != ()  # 55 %


def test_without_a_probe_from_every_rank_the_step_times_are_compared():
    # rank 2's trainer has no probe (or has not run it yet): a slow probe elsewhere names no one ...
    assert stragglers(*replay([[1.0, 1.0, 1.0]] * 7, probes=[0.05, 0.15, None]), BOUNDS) == ()
    # ... and a slow step does, as without probes
    [slow] = stragglers(*replay([[1.0, 1.0, 1.6]] * 7, probes=[0.05, 0.05, None]), BOUNDS)
    assert (slow.rank, slow.measure, slow.seconds) == (2, "step", 1.6)


def test_slow_input_is_named_by_its_data_time_as_a_share_of_the_step():
    even = [[1.0, 1.0, 1.0]] * 7  # every rank waits for rank 2's batch at the next collective
    probes = [0.05, 0.05, 0.05]  # the devices are equal
    [slow] = stragglers(*replay(even, probes=probes, data=[0.01, 0.012, 0.62]), BOUNDS)
    assert (slow.rank, slow.measure) == (2, "data")
    assert slow.describe() == (
        "rank 2 (pod job-g1-2 on node node-2) takes 0.62s for its data, 0.608s more than the gang's median "
        "0.012s, 61% of a 1s step"
    )
    # Milliseconds apart are noise beside the step, however large their ratio: no one.
    assert stragglers(*replay(even, probes=probes, data=[0.001, 0.001, 0.009]), BOUNDS) == ()
    assert stragglers(*replay(even, probes=probes, data=[0.01, 0.012, 0.5]), BOUNDS) == ()  # 49 % of a step
    # A rank without a data time (a trainer of your own) leaves the others compared by the probe.
    assert stragglers(*replay(even, probes=probes, data=[0.01, 0.012, None]), BOUNDS) == ()


def test_a_rank_slow_by_both_is_named_by_the_measure_it_is_furthest_above():
    even = [[1.0, 1.0, 1.0]] * 7
    [slow] = stragglers(*replay(even, probes=[0.05, 0.05, 0.2], data=[0.01, 0.01, 0.6]), BOUNDS)
    assert slow.measure == "probe"  # 6 times its allowance above the median, against 1.2 times the data's
    [slow] = stragglers(*replay(even, probes=[0.05, 0.05, 0.08], data=[0.01, 0.01, 2.0]), BOUNDS)
    assert slow.measure == "data"


def test_a_slow_link_is_named_by_the_link_probe_when_steps_and_compute_probes_are_even():
    even = [[2.0, 2.0, 2.0, 2.0]] * 7  # every collective waits for node 2's link
    probes = [0.05, 0.05, 0.05, 0.05]
    [slow] = stragglers(*replay(even, probes=probes, links=[0.01, 0.011, 0.04, 0.01]), BOUNDS)
    assert (slow.rank, slow.measure) == (2, "link")
    assert slow.describe() == (
        "rank 2 (pod job-g1-2 on node node-2) takes 0.04s for the link probe (its exchanges with other nodes), "
        "281% above the gang's median 0.0105s"
    )
    assert stragglers(*replay(even, probes=probes, links=[0.01, 0.01, 0.0145, 0.01]), BOUNDS) == ()  # 45 %
    # a rank without a link probe (a gang of two nodes, a trainer of your own): not compared by it
    assert stragglers(*replay(even, probes=probes, links=[0.01, 0.01, 0.04, None]), BOUNDS) == ()


def test_a_rank_slow_by_its_compute_probe_is_never_named_by_its_link_probe():
    """A starved host slows its exchanges too: the compute probe names it, whatever the excess."""
    even = [[2.0, 2.0, 2.0]] * 7
    [slow] = stragglers(*replay(even, probes=[0.05, 0.05, 0.08], links=[0.01, 0.01, 0.1]), BOUNDS)
    assert slow.measure == "probe"
    [slow] = stragglers(*replay(even, probes=[0.05, 0.05, 0.06], links=[0.01, 0.01, 0.1]), BOUNDS)
    assert slow.measure == "link"  # its probe is within the threshold: its link is what is slow
