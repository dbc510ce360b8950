"""`longctx run` of a PyTorch job (examples/pytorch-quickstart.yaml): the bundled PyTorch example
trainer as four local processes over gloo with the env the operator renders, live progress,
checkpoints, and a second run resuming from the first's last checkpoint."""

import math
import subprocess
import sys

import pytest
import yaml

from longctx_operator.localrun import PROGRESS_FILE, parse_event
from support.manifests import ROOT, load_example

pytestmark = pytest.mark.integration


def _job(tmp_path, **spec_changes):
    """The PyTorch quickstart, shortened, its relative corpus path made absolute."""
    manifest = load_example(ROOT / "examples" / "pytorch-quickstart.yaml")
    manifest["spec"]["data"]["path"] = str((ROOT / "examples" / manifest["spec"]["data"]["path"]).resolve())
    manifest["spec"].update({"sequenceLength": 512, "globalBatchTokens": 1024, **spec_changes})
    manifest["spec"]["checkpoint"]["intervalSteps"] = 4
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    return path


def _run(job, run_dir):
    proc = subprocess.run(
        [sys.executable, "-m", "longctx_operator.cli", "run", str(job), "--run-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_pytorch_job_trains_with_progress_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    out = _run(_job(tmp_path, steps=8), run_dir)
    steps = [line for line in out.splitlines() if line.startswith("step ")]
    assert [s.split()[1] for s in steps] == [f"{i}/8" for i in range(1, 9)], out
    assert "tokens/s" in steps[-1] and "MFU" in steps[-1]
    assert "checkpoint at step 4" in out and "checkpoint at step 8" in out
    losses = [float(s.split()[3]) for s in steps]
    assert losses[0] > math.log(256) - 0.6 and min(losses[-3:]) < losses[0] - 0.5, losses  # it learns
    events = [e for e in map(parse_event, (run_dir / PROGRESS_FILE).read_text().splitlines()) if e]
    joined = [e for e in events if e["event"] == "joined"]
    assert joined == [{"event": "joined", "rank": 0, "processes": 4, "backend": "gloo"}]
    for index in (1, 2, 3):  # the other ranks joined the same gang
        assert f'"rank": {index}, "processes": 4' in (run_dir / f"worker-{index}.log").read_text()

    out = _run(_job(tmp_path, steps=10), run_dir)  # the same run directory: its checkpoints
    assert "resumed from the checkpoint of step 8" in out
    assert [line.split()[1] for line in out.splitlines() if line.startswith("step ")] == ["9/10", "10/10"]
