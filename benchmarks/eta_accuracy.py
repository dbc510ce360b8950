"""How close the operator's ETA (status.progress.eta) comes to the real finish of a training run.

    python benchmarks/eta_accuracy.py [--job examples/quickstart.yaml] [--steps 300] [--interval 1]

Runs the job (with --steps steps) through `longctx run`, reads rank 0's step every --interval
seconds as the operator's progress poller reads it (the same `completion` arithmetic,
operator/progress.py), and when the last step is seen compares each estimate with the time that
was really left. Prints one row per quarter of the
run: the predicted and the real seconds left and the error. Nothing is asserted: ETA quality is a
measurement, not a test.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from longctx_operator.localrun import PROGRESS_FILE, parse_event
from longctx_operator.progress import completion

REPO = Path(__file__).resolve().parents[1]


def last_step(progress_file: Path) -> int | None:
    if not progress_file.exists():
        return None
    steps = [
        e["step"]
        for e in map(parse_event, progress_file.read_text().splitlines())
        if e is not None and e.get("event") == "step"
    ]
    return steps[-1] if steps else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--job", default=str(REPO / "examples" / "quickstart.yaml"))
    parser.add_argument("--steps", type=int, default=300, help="steps of the run (the example's own: 0)")
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between reads (the operator: 10)")
    args = parser.parse_args()
    job = yaml.safe_load(Path(args.job).read_text())
    if args.steps:
        job["spec"]["steps"] = args.steps
    total = job["spec"]["steps"]
    with tempfile.TemporaryDirectory() as scratch:
        job_file, run_dir = Path(scratch) / "job.yaml", Path(scratch) / "run"
        job_file.write_text(yaml.safe_dump(job))
        run = subprocess.Popen(
            [sys.executable, "-m", "longctx_operator.cli", "run", str(job_file), "--run-dir", str(run_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        reads, estimates, finished = [], [], None
        while run.poll() is None:
            time.sleep(args.interval)
            step = last_step(run_dir / PROGRESS_FILE)
            if step is None:
                continue
            now = time.monotonic()
            if step >= total and finished is None:
                finished = now
            reads.append((now, step))
            done = completion(reads, total)
            if done.eta_seconds is not None and step < total:
                estimates.append((now, step, done.eta_seconds))
    if run.returncode != 0 or not estimates or finished is None:
        print(f"run exited {run.returncode} with {len(estimates)} estimates: nothing to compare", file=sys.stderr)
        return 1
    print(f"{args.job} with {total} steps, reads every {args.interval:g} s, {time.strftime('%Y-%m-%d')}")
    print(f"{'at step':>8} {'done':>6} {'predicted left':>15} {'real left':>10} {'error':>8}")
    for quarter in (0.25, 0.5, 0.75, 0.9):
        now, step, predicted = min(estimates, key=lambda e: abs(e[1] / total - quarter))
        real = finished - now
        print(
            f"{step:>8} {100 * step / total:>5.0f}% {predicted:>14.1f}s {real:>9.1f}s "
            f"{100 * (predicted - real) / real:>+7.0f}%"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
