"""Proposes the planner's calibrated constants of one GPU from a gpu-check results file.

    python benchmarks/calibrate_planner.py $OUT/gpu-check.json

Reads the training runs `benchmarks/gpu_check.py` measured (peak device memory and step time,
with the planner's predictions beside them, made with the catalogue's constants at the time) and
proposes, for the GPU they ran on, the two constants of `trainer/contract/hardware.py` that scale those
predictions:
- `memory_factor`: the smallest that puts every predicted peak at or above the measured one;
- `matmul_efficiency`: the one whose predicted step times are right on (geometric) average (the
  one-GPU step time is compute, inversely proportional to it).
It then re-predicts every run with the proposed constants and checks the issue's bounds:
predicted memory never below the measured and within MEMORY_BOUND above, step time within
STEP_BOUND either way. The constants are a proposal: copy them into the catalogue with the date
and device (`Gpu.calibrated`), then pin the new predictions in a unit test.
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

from longctx_trainer.contract.hardware import GPUS, Gpu

MEMORY_BOUND = 0.15  # predicted peak memory at most 15% above the measured
STEP_BOUND = 0.25  # predicted step time within 25% of the measured


def measured_runs(results: dict) -> tuple[str, list[dict]]:
    """(the catalogue GPU, its runs with measured and predicted peak memory and step time)."""
    rows = results["stages"]["train"]["result"]["rows"]
    usable = [
        r
        for r in rows
        if r.get("status") == "ok" and r.get("peak_bytes") and "step_seconds" in (r.get("planner") or {})
    ]
    gpus = {r["planner"]["gpu"] for r in usable}
    if len(gpus) != 1:
        raise SystemExit(f"need measured runs of exactly one catalogue GPU, found {sorted(gpus) or 'none'}")
    return gpus.pop(), usable


def calibrate(gpu: Gpu, runs: list[dict]) -> dict:
    """The proposed constants and every run's prediction under them, with the bounds' verdicts."""
    memory_factor = gpu.memory_factor * max(r["peak_bytes"] / r["planner"]["peak_bytes"] for r in runs)
    ratios = [r["planner"]["step_seconds"] / r["step_seconds"] for r in runs]
    matmul_efficiency = gpu.matmul_efficiency * math.exp(sum(math.log(x) for x in ratios) / len(ratios))
    proposed = replace(gpu, memory_factor=memory_factor, matmul_efficiency=matmul_efficiency)
    checked = []
    for r in runs:
        memory = r["planner"]["peak_bytes"] * memory_factor / gpu.memory_factor
        step = r["planner"]["step_seconds"] * gpu.matmul_efficiency / matmul_efficiency
        checked.append({
            "run": f"{r['preset']} {r['seq']} {r['precision']} {r['policy']}",
            "measured_peak_bytes": r["peak_bytes"], "predicted_peak_bytes": round(memory),
            "measured_step_seconds": r["step_seconds"], "predicted_step_seconds": step,
            "memory_ok": r["peak_bytes"] <= round(memory) <= r["peak_bytes"] * (1 + MEMORY_BOUND),
            "step_ok": abs(step / r["step_seconds"] - 1) <= STEP_BOUND,
        })  # fmt: skip
    return {
        "gpu": gpu.name,
        "memory_factor": round(proposed.memory_factor, 4),
        "matmul_efficiency": round(proposed.matmul_efficiency, 4),
        "runs": checked,
        "within_bounds": all(c["memory_ok"] and c["step_ok"] for c in checked),
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="gpu-check.json of a GPU run")
    args = parser.parse_args(argv)
    results = json.loads(args.results.read_text())
    name, runs = measured_runs(results)
    proposal = calibrate(GPUS[name], runs)
    print(
        f"{name} (measured {results['started']} on {results['device']}, jax {results['jax']}): "
        f"memory_factor={proposal['memory_factor']}, matmul_efficiency={proposal['matmul_efficiency']}"
    )
    for c in proposal["runs"]:
        print(
            f"  {c['run']:<32} memory {c['predicted_peak_bytes'] / 2**30:6.1f} / "
            f"{c['measured_peak_bytes'] / 2**30:6.1f} GiB {'ok' if c['memory_ok'] else 'OUT'}  "
            f"step {c['predicted_step_seconds']:.3f} / "
            f"{c['measured_step_seconds']:.3f} s {'ok' if c['step_ok'] else 'OUT'}"
        )
    print("all within bounds" if proposal["within_bounds"] else "some runs are out of bounds: the model needs work")
    return proposal


if __name__ == "__main__":
    main()
