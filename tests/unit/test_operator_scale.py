"""benchmarks/operator_scale.py's rounds: the order each round runs the systems in, and the ratios
against issue #31's goals it reports for them, the operator settings it takes (its measurements need a
cluster: docs/operator.md)."""

from __future__ import annotations

import argparse

import pytest

from support.benchmarks import benchmark

scale = benchmark("operator_scale")


def batch(*running: float) -> dict:
    """A system's result whose gangs' pods were all Running `running` seconds after their creation."""
    return {"stages": {f"gang-{i}": {"running": seconds} for i, seconds in enumerate(running)}}


def test_each_system_starts_one_round_in_turn_and_every_round_runs_all():
    systems = ["raw", "jobset", "longctx"]
    rounds = [scale.rotated(systems, r) for r in range(3)]
    assert [order[0] for order in rounds] == systems
    assert all(sorted(order) == sorted(systems) for order in rounds)
    assert scale.rotated(systems, 3) == systems


def test_ratios_are_longctxs_percentiles_over_each_baseline_that_ran():
    ratios = scale.running_ratios({"raw": batch(10, 10, 20), "longctx": batch(12, 12, 30)})
    assert set(ratios) == {"raw"}  # JobSet did not run
    p50, p95 = ratios["raw"]
    assert p50 == scale.percentile([12, 12, 30], 0.5) / scale.percentile([10, 10, 20], 0.5)
    assert p95 == scale.percentile([12, 12, 30], 0.95) / scale.percentile([10, 10, 20], 0.95)


def test_the_summary_counts_the_rounds_that_met_each_goal(capsys):
    within, over = batch(11.9), batch(12.1)  # against raw's 10 s: x1.19 and x1.21
    scale.report_rounds(
        [
            {"raw": batch(10), "jobset": batch(12), "longctx": within},
            {"raw": batch(10), "jobset": batch(12), "longctx": over},
            {"raw": batch(10), "longctx": within},
        ]
    )
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "longctx/raw p95 by round: x1.19 x1.21 x1.19; <= 1.2 in 2 of 3",
        "longctx/jobset p95 by round: x0.99 x1.01; <= 1.0 in 1 of 2",
    ]


def test_an_operator_setting_is_a_checked_field_of_its_configuration():
    assert scale.setting("workers=48") == ("workers", 48)
    for bad, named in (("workers=0", "workers: Input should be greater"), ("wrkers=4", "wrkers: Extra inputs")):
        with pytest.raises(argparse.ArgumentTypeError, match=named):
            scale.setting(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="not JSON"):
        scale.setting("workers=many")
