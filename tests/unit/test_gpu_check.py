"""benchmarks/gpu_check.py, the one script a lent GPU session runs, on CPU with --cpu-smoke sizes:
the results file's structure and values, each stage's logic, and the numerics check's mutant.
The training and offload-reach stages spawn one process per run; their decisions are checked
with recorded outcomes, and one real spawned run checks the worker."""

import gzip
import json
import tarfile

import pytest

from support.benchmarks import benchmark

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gc():
    return benchmark("gpu_check")


@pytest.fixture(scope="module")
def smoke(gc):
    return gc.sizes(cpu_smoke=True)


def test_the_stage_budgets_fit_nine_minutes(gc):
    assert gc.TOTAL_BUDGET_S == sum(gc.STAGES.values()) <= 9 * 60 - 40  # start-up and the env stage around it


def test_the_gpu_numerics_cover_head_sizes_gqa_masks_and_the_ring(gc, smoke):
    every = gc.numerics_cases(None)
    assert {c[0] for c in every} == {64, 128} and {c[2] for c in every} == {8, 2}
    assert {c[3] for c in every} == {True, False} and {c[4] for c in every} == {1, 4}
    for i in range(5):  # the smoke subset still takes every value
        assert {c[i] for c in gc.numerics_cases(smoke["numerics_cases"])} == {c[i] for c in every}


def test_numerics_pass_and_fail_on_a_wrong_gradient(gc, smoke, monkeypatch):
    """Every case within bf16 tolerance of the fp32 reference; a kernel whose dq is 5% off fails."""
    result = gc.numerics(smoke)
    assert result["ok"] and len(result["cases"]) == len(smoke["numerics_cases"])
    assert all(0 < e < 2**-7 for c in result["cases"] for e in c["relative_error"].values())

    from longctx_trainer.ops import block_kernel as module

    right = module.block_kernel

    def wrong(*args, **kwargs):
        kernel = right(*args, **kwargs)

        def backward(*a):
            dq, dk, dv = kernel.backward(*a)
            return dq * 1.05, dk, dv

        return module.BlockKernel(kernel.forward, backward)

    monkeypatch.setattr(module, "block_kernel", wrong)
    bad = gc.numerics(smoke)
    assert not bad["ok"] and all(not c["ok"] for c in bad["cases"])


def test_offload_reach_doubles_then_bisects(gc, smoke, monkeypatch):
    """A device that fits up to 700 tokens without offload and 3000 with it."""
    probes = []

    def spawn(spec, limit_s):
        probes.append((spec["offload"], spec["seq"]))
        fits = spec["seq"] <= (3000 if spec["offload"] else 700)
        return {"status": "ok" if fits else "oom"}

    monkeypatch.setattr(gc, "spawn", spawn)
    cfg = dict(smoke, reach_first=256, reach_limit=8192, chunk=64)
    result = gc.offload_reach(cfg, deadline=float("inf"))
    assert result["off"]["longest"] == 640 and result["on"]["longest"] == 2944  # multiples of 2 chunks
    assert result["extension"] == 2944 / 640
    assert probes[:3] == [(False, 256), (False, 512), (False, 1024)]


def test_training_runs_in_priority_order_until_the_budget_is_spent(gc, smoke, monkeypatch):
    monkeypatch.setattr(gc, "spawn", lambda spec, limit_s: {"status": "ok", "step_seconds": 2.0, "peak_bytes": 10})
    cfg = gc.sizes(cpu_smoke=False)
    runs = gc.train_runs(cfg)
    assert len(runs) == 2 * 3 * 3
    first = [(r["preset"], r["seq"], r["precision"]) for r in runs[:8]]
    for i, preset in enumerate(("3b", "1b")):
        wanted = [(preset, 8192, "bf16"), (preset, 8192, "fp8"), (preset, 32768, "bf16"), (preset, 65536, "bf16")]
        assert first[4 * i : 4 * i + 4] == wanted
    assert {r["policy"] for r in runs[:8]} == {"save_attention"}
    assert {(r["precision"], r["policy"]) for r in runs} == {
        ("bf16", "save_attention"),
        ("bf16", "full"),
        ("fp8", "save_attention"),
    }
    rows = gc.training(cfg, deadline=0.0, planner=lambda spec: {})["rows"]
    assert {r["status"] for r in rows} == {"skipped"}


def test_one_spawned_training_run_reports_its_step(gc):
    """The worker, for real: a tiny run in its own process."""
    spec = dict(preset="tiny", seq=128, precision="bf16", policy="save_attention", offload=False, chunk=None, steps=3)
    row = gc.spawn(spec, 600)
    assert row["status"] == "ok" and row["step_seconds"] > 0 and row["tokens_per_second"] > 0
    assert row["device"] == "cpu" and row["peak_bytes"] is None  # the CPU reports no peak memory


def test_trace_summary_counts_device_ops_by_category(gc):
    trace = {"traceEvents": [
        {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
        {"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 1, "name": "gemm_host_side", "dur": 1e6},
        {"ph": "X", "pid": 2, "name": "cudnn_fmha_fwd", "dur": 3000},
        {"ph": "X", "pid": 2, "name": "sm90_xmma_gemm_bf16", "dur": 1500},
        {"ph": "X", "pid": 2, "name": "nvjet_sm90_tss_128x128_64x6_2x1_v_bz_TNT", "dur": 500},
        {"ph": "X", "pid": 2, "name": "ncclDevKernel_SendRecv", "dur": 1000},
        {"ph": "X", "pid": 2, "name": "MemcpyDtoH", "dur": 500},
        {"ph": "X", "pid": 2, "name": "loop_add_fusion", "dur": 500},
    ]}  # fmt: skip
    summary = gc.trace_summary(trace)
    assert summary["source"] == "device"
    assert summary["ms"] == {"attention": 3.0, "host_transfers": 0.5, "collectives": 1.0, "matmuls": 2.0,
                             "optimizer": 0.0, "other": 0.5}  # fmt: skip
    assert summary["top_ops"][0] == {"name": "cudnn_fmha_fwd", "ms": 3.0, "category": "attention"}


def test_the_whole_script_writes_one_results_file(gc, tmp_path, monkeypatch):
    """--cpu-smoke, every stage (the training runs recorded, see above): the JSON and the summary,
    each stage's status, time and budget, and the planner beside every measured run."""
    measured = {"status": "ok", "step_seconds": 0.5, "tokens_per_second": 256.0, "mfu": 0.1, "peak_bytes": 2**30}
    monkeypatch.setattr(gc, "spawn", lambda spec, limit_s: dict(measured, device="cpu"))
    results = gc.main(["--cpu-smoke", "--out", str(tmp_path)])
    on_disk = json.loads((tmp_path / gc.RESULTS_FILE).read_text())
    assert on_disk["stages"].keys() == gc.STAGES.keys() and on_disk == json.loads(json.dumps(results, default=str))
    for name, stage in on_disk["stages"].items():
        assert stage["status"] == "ok", (name, stage.get("error"))
        assert stage["budget_s"] == gc.STAGES[name] and stage["seconds"] > 0
    assert on_disk["stages"]["numerics"]["result"]["ok"] and on_disk["stages"]["fp8_hlo"]["result"]["ok"]
    with tarfile.open(tmp_path / gc.FP8_STEP_DUMP) as dump:  # XLA's own dump of the step
        programs = {m.name: dump.extractfile(m).read() for m in dump.getmembers() if m.name.endswith(".txt")}
    assert any(name.endswith("before_optimizations.txt") and b" dot(" in text for name, text in programs.items())
    assert any(name.endswith("after_optimizations.txt") and b"f8e4m3fn" in text for name, text in programs.items())
    assert on_disk["stages"]["attention"]["result"]["rows"][0]["ratio"] > 0
    profile = on_disk["stages"]["profile"]["result"]
    assert set(profile["ms"]) == {*gc.CATEGORIES, "other"} and sum(profile["ms"].values()) > 0
    assert gzip.decompress((tmp_path / profile["trace"]).read_bytes())
    rows = on_disk["stages"]["train"]["result"]["rows"]
    assert [r["status"] for r in rows] == ["ok"] * 3
    assert all(r["planner"]["gpu"] == "h100-80gb" and r["planner"]["peak_bytes"] > 0 for r in rows)
    compared = on_disk["planner_vs_measured"]
    assert len(compared) == 3
    assert compared[0]["memory_ratio"] == rows[0]["planner"]["peak_bytes"] / 2**30
    assert on_disk["stages"]["offload_reach"]["result"]["off"]["longest"] == 512
    summary = (tmp_path / gc.SUMMARY_FILE).read_text()
    assert "## train: ok" in summary and "| tiny 128 bf16 save_attention | ok |" in summary


def test_numerics_skips_the_cases_past_its_deadline(gc, smoke):
    result = gc.numerics(smoke, deadline=0.0)
    assert [c["skipped"] for c in result["cases"]] == ["stage budget spent"] * len(smoke["numerics_cases"])


def test_a_crashed_run_reports_its_message_not_its_stack(gc):
    """A native crash (seen on an H200: every 3b run's error was one "@ 0x..." frame) keeps the
    fatal line above its stack frames."""
    crashed = "\n".join([
        "step 0 compiling", "F1127 18:16:02.1 cuda_dnn.cc:123] Check failed: status.ok() cuDNN bad param",
        "*** Check failure stack trace: ***", "    @     0x7fb167329ecc  (unknown)",
        "    @     0x7fb167329ecd  (unknown)", "",
    ])  # fmt: skip
    lines = gc.failure_lines(crashed)
    assert lines[-2:] == ["F1127 18:16:02.1 cuda_dnn.cc:123] Check failed: status.ok() cuDNN bad param",
                          "*** Check failure stack trace: ***"]  # fmt: skip
    assert not any("@" in line for line in lines)


def test_a_second_run_can_shorten_the_stages_and_pick_its_runs(gc, monkeypatch, tmp_path):
    assert gc.budget_overrides(["train=120", "profile=10"]) == {"train": 120, "profile": 10}
    with pytest.raises(SystemExit, match="STAGE=SECONDS"):
        gc.budget_overrides(["trian=120"])
    seen = []

    def spawn(spec, limit_s):
        seen.append((spec["preset"], spec["seq"]))
        return {"status": "oom"}

    monkeypatch.setattr(gc, "spawn", spawn)
    results = gc.main(["--cpu-smoke", "--out", str(tmp_path), "--stages", "train", "--budget", "train=77",
                       "--seqs", "96", "--presets", "tiny", "--policies", "save_attention"])  # fmt: skip
    assert results["budget_s"] == 77 and results["stages"]["train"]["budget_s"] == 77
    assert seen == [("tiny", 96)] * 2  # bf16 and fp8, save_attention only


def test_a_training_run_gets_a_pods_gpu_environment(gc):
    """The operator's memory fraction and XLA flags (beside the caller's), and memory reserved at
    start as in a pod, whatever this process set for itself."""
    from longctx_operator.render.env import GPU_MEMORY_FRACTION, GPU_XLA_FLAGS

    env = gc.worker_env({gc.PREALLOCATE: "false", "XLA_FLAGS": "--xla_dump_to=/tmp/x", "HOME": "/root"})
    assert gc.PREALLOCATE not in env and env["HOME"] == "/root"
    assert env["XLA_PYTHON_CLIENT_MEM_FRACTION"] == GPU_MEMORY_FRACTION
    assert env["XLA_FLAGS"].split() == ["--xla_dump_to=/tmp/x", *GPU_XLA_FLAGS]
