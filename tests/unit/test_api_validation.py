"""`longctx validate` and the API models: valid examples pass, each malformed case names its field."""

import subprocess
import sys

import pytest
import yaml

from longctx_operator.api import parse_job, problems
from longctx_operator.cli import main
from support.manifests import EXAMPLES, apply_case, load_example, malformed_cases

BASE, CASES = malformed_cases()


def test_base_manifest_is_valid():
    assert problems(BASE) == []


def test_there_are_at_least_25_malformed_cases():
    assert len(CASES) >= 25


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_malformed_case_is_rejected_naming_its_field(case, tmp_path, capsys):
    manifest = apply_case(BASE, case)
    fields = [p.field for p in problems(manifest)]
    assert case["field"] in fields, fields
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert case["field"] in err and "Traceback" not in err
    assert all(line.startswith(str(path)) for line in err.splitlines())


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_are_valid(example):
    assert problems(load_example(example)) == []


def test_defaults_fill_the_spec():
    job = parse_job({"apiVersion": "longctx.io/v1alpha1", "kind": "LongContextJob",
                     "metadata": {"name": "d"},
                     "spec": {"model": {"preset": "tiny"}, "sequenceLength": 1024}})
    assert job.spec.parallelism.mode == "auto"
    assert job.spec.resources.nodes == 1 and job.spec.resources.gpus_per_node == 8
    assert job.spec.batch_tokens == 1024
    assert job.spec.processes_per_node() == 1


def test_nvshmem_defaults_to_one_process_per_gpu():
    manifest = apply_case(BASE, {"set": {"spec.communication.collectivePermute": "nvshmem"}})
    assert parse_job(manifest).spec.processes_per_node() == 8


@pytest.mark.parametrize("content,needle", [
    ("spec: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "mapping"),
])
def test_cli_reports_unreadable_input_in_one_line(tmp_path, content, needle):
    path = tmp_path / "bad.yaml"
    path.write_text(content)
    proc = subprocess.run([sys.executable, "-m", "longctx_operator.cli", "validate", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_missing_file_is_one_line(capsys):
    assert main(["validate", "/nonexistent/job.yaml"]) == 1
    err = capsys.readouterr().err.strip()
    assert "No such file" in err and len(err.splitlines()) == 1
