"""Time to recover under `longctx run` (no cluster): the quickstart's two workers, shortened to 6
steps of 1,024 tokens with checkpoints every 2 steps; rank 1's trainer crashes after step 3
(LONGCTX_FAULT_EXIT_AT_STEP=1:3, trainer/faults.py). Two ways, each in a run directory of its own:

- in-place: restartPolicy.inPlace; the launchers restart both trainers inside the same worker
  process trees (trainer/inplace.py): agreed and stopped, start and rendezvous, restore and
  compile, first step;
- restart: without it the run fails (`longctx run` stops the blocked survivor: SIGTERM, then
  SIGKILL after 20 s) and a new `longctx run` of the same directory resumes, as a new generation
  would: stopped, start and rendezvous, restore and compile, first step.

Every stage is read off the workers' own output files, each line stamped when it first appears
(polled every 50 ms): the crash line, the launcher's "starting ... again" line or the first run's
end, rank 0's `joined`, `compiled` and next `step` events. The operator's stages on a cluster
(detect, delete, schedule) are not in it: benchmarks/recovery.py measures those.

    python benchmarks/recovery_local.py OUT_DIR [in-place] [restart]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from support.manifests import load_example  # noqa: E402

PROGRESS, RANK0_LOG = "worker-0.progress.jsonl", "worker-0.log"


def manifest(in_place: bool, fault: bool = True) -> dict:
    job = load_example(ROOT / "examples" / "quickstart.yaml")
    spec = job["spec"]
    spec["data"]["path"] = str((ROOT / "examples" / spec["data"]["path"]).resolve())
    spec.update({"steps": 6, "sequenceLength": 512, "globalBatchTokens": 1024})
    spec["checkpoint"]["intervalSteps"] = 2
    spec["restartPolicy"]["inPlace"] = in_place
    if fault:
        spec["env"] = [{"name": "LONGCTX_FAULT_EXIT_AT_STEP", "value": "1:3"}]
    return job


class Stamps:
    """Each whole line of the watched files with the monotonic time it was first seen."""

    def __init__(self, files: list[Path]):
        self.offsets = {f: 0 for f in files}
        self.lines: list[tuple[float, str, str]] = []

    def poll(self) -> None:
        now = time.monotonic()
        for path, offset in self.offsets.items():
            if not path.exists():
                continue
            data = path.read_bytes()[offset:]
            whole = data.rfind(b"\n") + 1
            for line in data[:whole].decode(errors="replace").splitlines():
                self.lines.append((now, path.name, line))
            self.offsets[path] = offset + whole

    def first(self, wanted: Callable[[str, str], bool], after: float = 0.0) -> float:
        return next(t for t, name, line in self.lines if t >= after and wanted(name, line))


def longctx_run(job: Path, run_dir: Path, stamps: Stamps) -> tuple[int, float]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "longctx_operator.cli", "run", str(job), "--run-dir", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while proc.poll() is None:
        stamps.poll()
        time.sleep(0.05)
    stamps.poll()
    return proc.returncode, time.monotonic()


def event(kind: str) -> Callable[[str, str], bool]:
    return lambda name, line: name == PROGRESS and f'"event": "{kind}"' in line


def measure(mode: str, base: Path) -> dict:
    base.mkdir(parents=True)
    run_dir, job = base / "run", base / "job.yaml"
    stamps = Stamps([run_dir / PROGRESS, run_dir / RANK0_LOG, run_dir / "worker-1.log"])
    job.write_text(yaml.safe_dump(manifest(mode == "in-place")))
    code, ended = longctx_run(job, run_dir, stamps)
    crash = stamps.first(lambda name, line: "LONGCTX_FAULT_EXIT_AT_STEP: exiting" in line)
    out: dict = {"mode": mode, "first_run_exit": code}
    if mode == "restart":
        job.write_text(yaml.safe_dump(manifest(False, fault=False)))
        out["stopped"] = ended - crash
        out["second_run_exit"], _ = longctx_run(job, run_dir, stamps)
        restarted = ended
    else:
        restarted = stamps.first(lambda name, line: name == RANK0_LOG and "starting this pod's trainer" in line)
        out["agreed_and_stopped"] = restarted - crash
    joined = stamps.first(event("joined"), after=restarted)
    compiled = stamps.first(event("compiled"), after=restarted)
    step = stamps.first(event("step"), after=compiled)
    out |= {
        "start_and_rendezvous": joined - restarted,
        "restore_and_compile": compiled - joined,
        "first_step": step - compiled,
        "total": step - crash,
    }
    return {k: round(v, 1) if isinstance(v, float) else v for k, v in out.items()}


def main() -> None:
    base = Path(sys.argv[1])
    for i, mode in enumerate(sys.argv[2:] or ["in-place", "restart"]):
        load = [round(x, 1) for x in os.getloadavg()]
        print(json.dumps({"load": load, **measure(mode, base / f"{i}-{mode}")}), flush=True)


if __name__ == "__main__":
    main()
