"""In-place restart under `longctx run`: two real launchers and JAX trainers over gloo; rank 1's
trainer crashes once after step 3 (LONGCTX_FAULT_EXIT_AT_STEP), after the checkpoint of step 2."""

import subprocess
import sys

import pytest
import yaml

from longctx_operator.localrun import PROGRESS_FILE, parse_event
from longctx_trainer.faults import FAULT_EXIT_CODE
from support.manifests import ROOT, load_example

pytestmark = pytest.mark.integration


def _run(tmp_path, in_place: bool) -> tuple[subprocess.CompletedProcess, list[dict]]:
    manifest = load_example(ROOT / "examples" / "quickstart.yaml")
    spec = manifest["spec"]
    spec["data"]["path"] = str((ROOT / "examples" / spec["data"]["path"]).resolve())
    spec.update({"steps": 5, "sequenceLength": 512, "globalBatchTokens": 1024})
    spec["checkpoint"]["intervalSteps"] = 2
    spec["restartPolicy"]["inPlace"] = in_place
    spec["env"] = [{"name": "LONGCTX_FAULT_EXIT_AT_STEP", "value": "1:3"}]
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump(manifest))
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "longctx_operator.cli", "run", str(job), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    events = [e for e in map(parse_event, (run_dir / PROGRESS_FILE).read_text().splitlines()) if e]
    return done, events


def test_a_crashed_rank_restarts_the_gang_in_place_from_its_checkpoint(tmp_path):
    done, events = _run(tmp_path, in_place=True)
    assert done.returncode == 0, done.stderr
    kinds = [(e["event"], e.get("step")) for e in events if e["event"] in ("step", "checkpoint", "resume", "done")]
    # both restarted and resumed from step 2's checkpoint; rank 0 may have finished step 3 before
    # its trainer was stopped (rank 1 crashed after it)
    resumed = kinds.index(("resume", 2))
    assert kinds[:resumed] in (
        [("step", 1), ("step", 2), ("checkpoint", 2)],
        [("step", 1), ("step", 2), ("checkpoint", 2), ("step", 3)],
    ), kinds
    assert kinds[resumed:] == [
        ("resume", 2),
        ("step", 3),
        ("step", 4),
        ("checkpoint", 4),
        ("step", 5),
        ("checkpoint", 5),
        ("done", 5),
    ], kinds
    assert sum(e["event"] == "joined" for e in events) == 2  # rank 0's trainer joined twice
    logs = [(tmp_path / "run" / f"worker-{i}.log").read_text() for i in (0, 1)]
    line = f"in-place restart 1: rank 1 failed with exit code {FAULT_EXIT_CODE}"
    # the same two launchers (the run started two and neither exited) restarted their trainers
    assert all(line in log for log in logs), logs
    assert '"event": "joined"' in logs[1] and logs[1].count('"event": "joined"') == 2


def test_without_in_place_restart_the_crash_fails_the_run(tmp_path):
    done, events = _run(tmp_path, in_place=False)
    assert done.returncode != 0
    assert f"worker 1 exited with code {FAULT_EXIT_CODE}" in done.stderr + done.stdout, done.stderr
    assert not any(e["event"] == "resume" for e in events)
