"""benchmarks/calibrate_planner.py: the constants it proposes from a gpu-check results file, and
the planner's predictions under them (the catalogue's `memory_factor`, `matmul_efficiency`).

No GPU run has been calibrated yet (docs/benchmarks.md records no peak memory), so the measured
runs here are made up: the planner's own predictions for three H200 runs, with peaks 2-8% above
them and step times 1.5-1.7x theirs."""

from dataclasses import replace

import pytest

from longctx_operator.planner import PlanRequest, plan
from longctx_trainer.contract import hardware
from longctx_trainer.contract.presets import PRESETS
from support.benchmarks import benchmark

RUNS = [  # (preset, seq, precision, policy, measured peak over predicted, measured step over predicted)
    ("1b", 8192, "bf16", "save_attention", 1.08, 1.6),
    ("1b", 32768, "bf16", "full", 1.02, 1.5),
    ("3b", 8192, "fp8", "save_attention", 1.05, 1.7),
]


@pytest.fixture(scope="module")
def tool():
    return benchmark("calibrate_planner")


def _predict(preset, seq, precision, policy):
    planned = plan(
        PlanRequest(
            model=PRESETS[preset], sequence_length=seq, global_batch_tokens=seq, nodes=1, gpus_per_node=1,
            gpu="h200-141gb", fabric="infiniband", precision=precision, data=1, context=1, tensor=1, offload=False,
            remat_policy=policy,
        )
    )  # fmt: skip
    return planned.chosen.memory.total, planned.step_seconds


def _results(runs=RUNS) -> dict:
    rows = []
    for preset, seq, precision, policy, memory, step in runs:
        peak, seconds = _predict(preset, seq, precision, policy)
        rows.append({
            "preset": preset, "seq": seq, "precision": precision, "policy": policy, "status": "ok",
            "peak_bytes": round(peak * memory), "step_seconds": seconds * step,
            "planner": {"gpu": "h200-141gb", "peak_bytes": peak, "step_seconds": seconds},
        })  # fmt: skip
    return {"started": "2026-11-26T00:00:00Z", "device": "NVIDIA H200", "jax": "0.11.2",
            "stages": {"train": {"status": "ok", "result": {"rows": rows}}}}  # fmt: skip


def test_the_proposal_covers_the_largest_memory_and_the_mean_step(tool):
    gpu, runs = tool.measured_runs(_results())
    proposal = tool.calibrate(hardware.GPUS[gpu], runs)
    assert proposal["memory_factor"] == 1.08
    assert proposal["matmul_efficiency"] == round(0.5 / (1.6 * 1.5 * 1.7) ** (1 / 3), 4) == 0.3129
    assert proposal["within_bounds"]
    for run, (*_, memory, _) in zip(proposal["runs"], RUNS, strict=True):
        assert run["measured_peak_bytes"] <= run["predicted_peak_bytes"]
        assert run["predicted_peak_bytes"] / run["measured_peak_bytes"] == pytest.approx(1.08 / memory, rel=1e-6)


def test_the_planner_predicts_the_calibrated_figures(tool, monkeypatch):
    """The proposal copied into the catalogue: the planner's own predictions equal the tool's."""
    gpu, runs = tool.measured_runs(_results())
    proposal = tool.calibrate(hardware.GPUS[gpu], runs)
    calibrated = replace(
        hardware.GPUS[gpu],
        memory_factor=proposal["memory_factor"],
        matmul_efficiency=proposal["matmul_efficiency"],
        calibrated="2026-11-26, made-up runs (test)",
    )
    monkeypatch.setitem(hardware.GPUS, gpu, calibrated)
    for run, (preset, seq, precision, policy, *_) in zip(proposal["runs"], RUNS, strict=True):
        peak, seconds = _predict(preset, seq, precision, policy)
        assert peak == pytest.approx(run["predicted_peak_bytes"], rel=1e-4)
        assert seconds == pytest.approx(run["predicted_step_seconds"], rel=1e-3)


def test_runs_the_constants_cannot_fit_are_out_of_bounds(tool):
    """Step times 1.0x and 2.0x the prediction: no one efficiency puts both within 25%; peaks
    1.0x and 1.3x: covering the larger puts the smaller 30% over."""
    runs = [("1b", 8192, "bf16", "full", 1.0, 1.0), ("1b", 32768, "bf16", "full", 1.3, 2.0)]
    gpu, measured = tool.measured_runs(_results(runs))
    proposal = tool.calibrate(hardware.GPUS[gpu], measured)
    assert not proposal["within_bounds"]
    assert [(r["memory_ok"], r["step_ok"]) for r in proposal["runs"]] == [(False, False), (True, False)]


def test_the_catalogue_is_not_calibrated_yet():
    """docs/benchmarks.md's H200 runs recorded no peak memory: every GPU keeps its defaults."""
    assert all(g.calibrated is None and g.memory_factor == 1.0 for g in hardware.GPUS.values())
