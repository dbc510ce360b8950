"""`longctx plan` from flags and from a manifest: readable table, JSON, one-line errors."""

import json

import pytest

from longctx_operator.cli import main
from support.manifests import ROOT

FLAGS = [
    "plan",
    "--model",
    "llama3-8b",
    "--sequence-length",
    "262144",
    "--gpus",
    "32",
    "--gpus-per-node",
    "8",
    "--gpu",
    "h100-80gb",
]


def test_plan_table_shows_layout_memory_throughput_and_rejections(capsys):
    assert main(FLAGS) == 0
    out = capsys.readouterr().out
    assert "Chosen layout: data=" in out
    for component in ("params", "master weights", "Adam moments", "gradients", "activations", "total"):
        assert component in out
    assert "tokens/s" in out and "MFU" in out
    assert "Rejected layouts:" in out and "exceeds 8 GPUs per node" in out


def test_plan_json_agrees_with_the_table(capsys):
    assert main(FLAGS + ["--output", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    layout = plan["layout"]
    assert layout["data"] * layout["context"] * layout["tensor"] == 32
    assert main(FLAGS) == 0
    assert f"context={layout['context']} tensor={layout['tensor']}" in capsys.readouterr().out


def test_plan_from_a_manifest(capsys):
    assert main(["plan", str(ROOT / "examples" / "gcp-a3-mega.yaml")]) == 0
    assert "data=1 context=32 tensor=4" in capsys.readouterr().out


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--tensor", "16"], "spec.parallelism.tensor"),
        (["--gpus", "12"], "--gpus"),
        (["--gpus", "1000000000"], "--gpus 1000000000: 125000000 nodes of 8 GPUs; the number of nodes"),
        (["--model", "gpt-5"], "--model"),
        (["--memory", "lots"], "--memory"),
    ],
)
def test_plan_errors_are_one_line(capsys, extra, needle):
    assert main(FLAGS + extra) == 1
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_plan_from_a_manifest_keeps_offload_within_its_memory_limit(tmp_path, capsys):
    import yaml

    job = yaml.safe_load((ROOT / "examples" / "llama3-8b-128k-infiniband-nvshmem.yaml").read_text())
    job["spec"].update(sequenceLength=1_048_576, globalBatchTokens=1_048_576)
    job["spec"]["resources"].update(nodes=1, memory="256Gi")
    job["spec"]["parallelism"] = {"mode": "auto"}
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["plan", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("longctx: spec.resources.memory: no layout fits") and "resources.memory 256.0 GiB" in err
    job["spec"]["resources"]["memory"] = "1Ti"
    path.write_text(yaml.safe_dump(job))
    assert main(["plan", str(path)]) == 0
    assert "GiB per pod of 819.20 usable, 80% of resources.memory" in capsys.readouterr().out


def test_plan_fp8_shows_the_difference_against_bf16(capsys):
    assert main(FLAGS + ["--precision", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "Against bf16 (the same job planned in bf16):" in out and "FP8 scaling state" in out
    assert main(FLAGS + ["--precision", "fp8", "--output", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["againstBf16"]["fits"] and plan["againstBf16"]["speedup"] > 1
    assert plan["memory"]["bytes"]["fp8Scaling"] > 0


def test_plan_fp8_on_a_gpu_without_it_is_one_line(capsys):
    assert main(FLAGS[:-1] + ["a100-80gb", "--precision", "fp8"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--precision" in err and "FP8" in err


def test_plan_auto_attention_shows_every_kind_on_the_chosen_layout(capsys):
    assert main(FLAGS + ["--attention", "auto", "--output", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["attentionRequested"] == "auto" and plan["attention"] in ("ring", "all_gather", "ulysses", "hybrid")
    on_layout = [c for c in plan["candidates"] if c["layout"] == plan["layout"]]
    assert sorted(c["attention"] for c in on_layout) == ["all_gather", "hybrid", "ring", "ulysses"]
    fastest = min((c for c in on_layout if c["fits"]), key=lambda c: c["stepSeconds"])
    assert fastest["attention"] == plan["attention"] and fastest["stepSeconds"] == plan["stepSeconds"]
    assert main(FLAGS + ["--attention", "auto"]) == 0
    out = capsys.readouterr().out
    assert f"Attention: {plan['attention']} (auto)" in out
    kinds = out.split("(auto keeps the fastest):")[1].split("\n\n")[0].splitlines()[2:]
    assert [line.split()[0] for line in kinds] == ["ring", "all_gather", "ulysses", "hybrid"]


def test_plan_unknown_attention_is_one_line(capsys):
    assert main(FLAGS + ["--attention", "tree"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--attention" in err
