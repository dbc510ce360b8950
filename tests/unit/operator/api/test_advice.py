"""Warnings for valid specs that are likely mistakes (operator/api/advice.py)."""

import pytest

from longctx_operator import reasons
from longctx_operator.api.advice import advice
from longctx_operator.api.spec import LongContextJobSpec


def spec(nodes=2, **checkpoint) -> LongContextJobSpec:
    return LongContextJobSpec.model_validate(
        {
            "model": {"preset": "tiny"},
            "sequenceLength": 4096,
            "resources": {"nodes": nodes, "gpusPerNode": 8, "gpuType": "h100-80gb"},
            "checkpoint": checkpoint,
        }
    )


@pytest.mark.parametrize(
    "checkpoint", [{"persistentVolumeClaim": "shared"}, {"path": "gs://bucket/run"}, {"path": "s3://bucket/run"}]
)
def test_shared_checkpoint_storage_gets_no_warning(checkpoint):
    assert advice(spec(**checkpoint)) == []


def test_multi_node_checkpoints_on_pod_disks_are_never_complete():
    [warning] = advice(spec(nodes=4, path="/ckpt"))
    assert (warning.reason, warning.field) == (
        reasons.CHECKPOINT_NOT_PERSISTENT,
        "spec.checkpoint.persistentVolumeClaim",
    )
    assert "'/ckpt'" in warning.message and "4 different disks" in warning.message
    assert "starts again from step 0" in warning.message
    assert str(warning).startswith(
        "warning: spec.checkpoint.persistentVolumeClaim: on Kubernetes, checkpoint.path '/ckpt'"
    )


def test_one_node_checkpoints_on_the_pod_disk_are_lost_on_restart():
    [warning] = advice(spec(nodes=1))
    assert "the pod's own disk" in warning.message and "different disks" not in warning.message


def test_validate_prints_the_warning_and_still_passes(tmp_path, capsys):
    import yaml

    from longctx_operator.cli import main
    from support.manifests import EXAMPLES, load_example

    manifest = load_example(next(p for p in EXAMPLES if p.stem == "llama3-8b-128k-infiniband-nvshmem"))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    assert main(["validate", str(path)]) == 0
    assert capsys.readouterr().err == ""
    del manifest["spec"]["checkpoint"]["persistentVolumeClaim"]
    path.write_text(yaml.safe_dump(manifest))
    assert main(["validate", str(path)]) == 0
    captured = capsys.readouterr()
    assert captured.out == f"{path}: valid\n"
    assert captured.err.startswith(f"{path}: warning: spec.checkpoint.persistentVolumeClaim: ")
    assert len(captured.err.splitlines()) == 1


@pytest.mark.parametrize("command", ["validate", "plan", "render"])
def test_the_cli_leaves_cluster_storage_out_of_cpu_jobs(capsys, command):
    """The quickstart (2 CPU workers, a relative checkpoint path) gets no storage paragraph; the
    operator's Event stays (advice), and a GPU job keeps its warning (above)."""
    from longctx_operator.api.validate import parse_job
    from longctx_operator.cli import main
    from support.manifests import ROOT, load_example

    quickstart = ROOT / "examples" / "quickstart.yaml"
    assert main([command, str(quickstart)]) == 0
    assert "warning" not in capsys.readouterr().err
    assert [a.reason for a in advice(parse_job(load_example(quickstart)).spec)] == [reasons.CHECKPOINT_NOT_PERSISTENT]
