"""`longctx validate` and the API models: valid examples pass, each malformed case names its field."""

import importlib.util
import subprocess
import sys

import pytest
import yaml

from longctx_operator.api import parse_job, problems
from longctx_operator.cli import main
from support.jobs import job_manifest
from support.manifests import EXAMPLES, ROOT, apply_case, load_example, malformed_cases

BASE, CASES = malformed_cases()


def test_base_manifest_is_valid():
    assert problems(BASE) == []


def test_there_are_at_least_25_malformed_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_malformed_case_is_rejected_naming_its_field(case, tmp_path, capsys):
    manifest = apply_case(BASE, case)
    fields = [p.field for p in problems(manifest)]
    if case.get("only") == "validate":  # valid to the API's rules; the planner refuses it
        assert fields == []
    else:
        assert case["field"] in fields, fields
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert case["field"] in err and "Traceback" not in err
    assert all(line.startswith(str(path)) for line in err.splitlines())


def test_a_pytorch_job_without_a_command_is_shown_the_bundled_example():
    """The refusal points at the PyTorch example trainer longctx bundles (it once said there was none)."""
    manifest = apply_case(BASE, {"set": {"spec.trainer": {"framework": "pytorch"}}})
    (message,) = [p.message for p in problems(manifest) if p.field == "spec.trainer.command"]
    assert "[python, -m, longctx_trainer.pytorch]" in message and "JAX trainer only" not in message
    assert importlib.util.find_spec("longctx_trainer.pytorch") is not None


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_are_valid(example):
    assert problems(load_example(example)) == []


def test_defaults_fill_the_spec():
    job = parse_job(job_manifest("d", sequence_length=1024))
    assert job.spec.parallelism.mode == "auto"
    assert job.spec.resources.nodes == 1 and job.spec.resources.gpus_per_node == 8
    assert job.spec.batch_tokens == 1024
    assert job.spec.processes_per_node() == 1


def test_nvshmem_defaults_to_one_process_per_gpu():
    manifest = apply_case(BASE, {"set": {"spec.communication.collectivePermute": "nvshmem"}})
    assert parse_job(manifest).spec.processes_per_node() == 8


@pytest.mark.parametrize(
    "content,needle",
    [
        ("spec: [unclosed", "not valid YAML"),
        ("- just\n- a list\n", "mapping"),
    ],
)
def test_cli_reports_unreadable_input_in_one_line(tmp_path, content, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    proc = subprocess.run(
        [sys.executable, "-m", "longctx_operator.cli", "validate", str(path)], capture_output=True, text=True
    )
    assert proc.returncode == 1
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_missing_file_is_one_line(capsys):
    assert main(["validate", "/nonexistent/job.yaml"]) == 1
    err = capsys.readouterr().err.strip()
    assert "No such file" in err and len(err.splitlines()) == 1


def test_auto_mode_leaves_sequence_divisibility_to_the_planner_like_the_server():
    manifest = apply_case(
        BASE,
        {
            "set": {
                "spec.parallelism": {"mode": "auto"},
                "spec.sequenceLength": 131071,
                "spec.globalBatchTokens": 262142,
            }
        },
    )
    assert problems(manifest) == []


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["plan", "--model", "tiny", "--sequence-length", "1024", "--gpus-per-node", "0"], "--gpus"),
        (["render", "BINARY"], "not a text file"),
        (["run", "examples/quickstart.yaml", "--run-dir", "AFILE"], "--run-dir"),
        (["export", "AFILE", "--output", "out"], "expected the --run-dir of a `longctx run`"),
    ],
)
def test_cli_bad_input_is_one_line_without_traceback(tmp_path, argv, needle):
    binary = tmp_path / "bad.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    afile = tmp_path / "afile"
    afile.write_text("")
    argv = [str(binary) if a == "BINARY" else str(afile) if a == "AFILE" else a for a in argv]
    proc = subprocess.run(
        [sys.executable, "-m", "longctx_operator.cli", *argv], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert needle in last and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    "content", [None, "trainerImage: [a\n", "canReadNodes: false\n"], ids=["missing", "not-yaml", "unknown-key"]
)
def test_cli_unreadable_operator_config_is_one_line(tmp_path, content):
    path = tmp_path / "operator.yaml"
    if content is not None:
        path.write_text(content)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "longctx_operator.cli",
            "render",
            str(ROOT / "examples" / "quickstart.yaml"),
            "--config",
            str(path),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"--config {path}" in proc.stderr.strip().splitlines()[-1]


def test_the_pytorch_example_takes_rope_scaling_factor_1_which_is_none():
    example = load_example(ROOT / "examples" / "pytorch-quickstart.yaml")
    example["spec"]["model"]["ropeScaling"] = {"factor": 1}
    assert problems(example) == []
    example["spec"]["model"]["ropeScaling"] = {"factor": 1.5}
    assert [p.field for p in problems(example)] == ["spec.model.ropeScaling"]
