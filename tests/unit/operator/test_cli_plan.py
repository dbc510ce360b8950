"""`longctx plan` from flags and from a manifest: readable table, JSON, one-line errors."""

import json

import pytest

from longctx_operator.cli import main
from support.manifests import EXAMPLES, ROOT

FLAGS = [
    "plan",
    "--model",
    "llama3-8b",
    "--sequence-length",
    "262144",
    "--nodes",
    "4",
    "--gpus-per-node",
    "8",
    "--gpu-type",
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
        (["--nodes", "5000"], "--nodes"),
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
    assert (
        err.startswith(f"longctx: {path}: spec.resources.memory: no layout fits")
        and "resources.memory 256.0 GiB" in err
    )
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
    kinds = ["allGather", "hybrid", "ring", "tokenRing", "ulysses"]
    assert plan["attentionRequested"] == "auto" and plan["attention"] in kinds
    on_layout = [c for c in plan["candidates"] if c["layout"] == plan["layout"]]
    assert sorted(c["attention"] for c in on_layout) == kinds
    fastest = min((c for c in on_layout if c["fits"]), key=lambda c: c["stepSeconds"])
    assert fastest["attention"] == plan["attention"] and fastest["stepSeconds"] == plan["stepSeconds"]
    assert main(FLAGS + ["--attention", "auto"]) == 0
    out = capsys.readouterr().out
    assert f"Attention: {plan['attention']} (auto)" in out
    kinds = out.split("(auto keeps the fastest):")[1].split("\n\n")[0].splitlines()[2:]
    assert [line.split()[0] for line in kinds] == ["ring", "allGather", "ulysses", "hybrid", "tokenRing"]


def test_plan_unknown_attention_is_one_line(capsys):
    assert main(FLAGS + ["--attention", "tree"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--attention" in err


@pytest.mark.parametrize(
    "old, new",
    [
        (["--gpus", "32"], ["--nodes", "4"]),
        (["--gpu", "h200-141gb"], ["--gpu-type", "h200-141gb"]),
    ],
)
def test_old_flag_names_still_work_with_a_deprecation_line(capsys, old, new):
    base = ["plan", "--model", "llama3-8b", "--sequence-length", "262144", "-o", "json"]
    assert main(base + new) == 0
    expected = capsys.readouterr()
    assert expected.err == ""
    assert main(base + old) == 0
    got = capsys.readouterr()
    assert got.out == expected.out
    [line] = got.err.splitlines()
    assert line.startswith(f"longctx: warning: {old[0]} is deprecated: use {new[0]}")


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--gpus", "12"], "--gpus 12 must be a positive multiple of --gpus-per-node 8"),
        (["--gpus", "1000000000"], "--gpus 1000000000: 125000000 nodes of 8 GPUs; the number of nodes"),
        (["--gpus", "16", "--nodes", "2"], "--gpus and --nodes: give --nodes only"),
    ],
)
def test_deprecated_gpus_errors_name_it(capsys, extra, needle):
    assert main(["plan", "--model", "llama3-8b", "--sequence-length", "262144", *extra]) == 1
    deprecation, error = capsys.readouterr().err.strip().splitlines()
    assert "--gpus is deprecated" in deprecation and needle in error


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_plan_runs_on_every_example(capsys, example):
    assert main(["plan", str(example)]) == 0
    assert "data=" in capsys.readouterr().out


def test_plan_of_the_cpu_quickstart_prints_its_manual_layout(capsys):
    assert main(["plan", str(ROOT / "examples" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Layout: data=2 context=4 tensor=1  (manual")
    assert "load balance dualChunkSwap" in out and "2 pods, 1 process each, 4 CPU devices per process" in out
    assert main(["plan", str(ROOT / "examples" / "quickstart.yaml"), "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["layout"] == {"data": 2, "context": 4, "tensor": 1} and plan["loadBalance"] == "dualChunkSwap"


def test_plan_prints_the_manifests_spellings(capsys):
    assert main(FLAGS + ["--attention", "allGather"]) == 0
    out = capsys.readouterr().out
    assert "Attention: allGather, load balance dualChunkSwap" in out
    assert "all_gather" not in out and "dual_chunk_swap" not in out
    assert main(FLAGS + ["--attention", "allGather", "-o", "json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert (plan["attention"], plan["loadBalance"]) == ("allGather", "dualChunkSwap")


def test_a_pinned_layout_slower_than_one_listed_gets_a_warning(capsys):
    assert main(FLAGS + ["-o", "json"]) == 0
    auto = json.loads(capsys.readouterr().out)
    fitting = [c for c in auto["candidates"] if c["fits"] and c["layout"] != auto["layout"]]
    slow = sorted(fitting, key=lambda c: c["tokensPerSecond"])[len(fitting) // 2]  # some fit slower still
    pinned = [f"--{axis}={slow['layout'][axis]}" for axis in ("data", "context", "tensor")]
    assert main(FLAGS + pinned) == 0
    captured = capsys.readouterr()
    [warning] = captured.err.splitlines()
    assert warning.startswith("longctx: warning: --data, --context, --tensor: the pinned layout ")
    assert "is slower than" in warning
    faster, slower = captured.out.split("Other layouts that fit (slower):")
    assert "Faster layouts that fit (the pinned layout is slower):" in faster
    listed = [float(line.split()[6].replace(",", "")) for line in slower.split("\n\n")[0].splitlines()[2:]]
    assert listed and all(speed <= slow["tokensPerSecond"] for speed in listed)
    assert main(FLAGS) == 0  # auto keeps the fastest: nothing faster, no warning
    assert "Faster layouts" not in capsys.readouterr().out


def test_plan_errors_of_a_file_name_the_file_and_the_field(tmp_path, capsys):
    import yaml

    job = yaml.safe_load((ROOT / "examples" / "llama3-8b-256k-efa.yaml").read_text())
    job["spec"]["parallelism"] = {"mode": "auto"}
    job["spec"].update(sequenceLength=262_143, globalBatchTokens=262_143)
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    assert main(["plan", str(path)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"longctx: {path}: spec.sequenceLength: none of the ")
