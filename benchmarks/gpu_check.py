"""Everything a lent GPU session measures, in one run under 9 minutes, into one results file.

    python benchmarks/gpu_check.py --out $OUT            # on the GPU (hack/gpu-check runs this)
    python benchmarks/gpu_check.py --out /tmp/x --cpu-smoke   # every stage, tiny sizes, on CPU

Stages, each with its own time budget (STAGES; their sum is TOTAL_BUDGET_S) and each recorded
even when it fails or runs out of time:
- numerics: the ring's block kernel (cuDNN on CUDA, ops/block_kernel.py) against the fp32
  reference, forward and gradients, head sizes 64 and 128, GQA, causal and not, once whole and
  once as a ring emulated on one device (K/V sliced into blocks, partials merged by log-sum-exp,
  the backward per block from the global output and log-sum-exp);
- fp8_hlo: the compiled fp8 training step's FP8 GEMM custom calls (on CPU: the step's FP8 dots);
- attention: longctx's attention against cuDNN's (benchmarks/attention_gpu.py's timing);
- train: tokens/s, MFU, step time and peak memory of the 1b and 3b presets at 8K/32K/64K, bf16
  and fp8, remat policy full and save_attention, each run a capped subprocess, in priority order
  until the stage's budget is spent; the planner's predicted peak memory and step time beside each;
- offload_reach: the longest sequence one GPU trains, offload off and on (doubling, then
  bisecting; every probe a capped subprocess);
- profile: one training step under jax.profiler, device time per op category (attention,
  matmuls, collectives, host transfers, optimizer, other) parsed from the Perfetto trace.
Writes gpu-check.json (RESULTS_FILE) and gpu-check.md (a readable summary) under --out, and XLA's
dump of the fp8 step (FP8_STEP_DUMP). Training runs get a trainer pod's GPU environment
(`worker_env`); this process reserves no GPU memory up front.
`benchmarks/calibrate_planner.py` reads the JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

RESULTS_FILE = "gpu-check.json"
SUMMARY_FILE = "gpu-check.md"
STAGES: dict[str, int] = {  # seconds per stage on the GPU
    "numerics": 55,  # 14 of 16 cases in 45 s on an H200 (2026-11-27)
    "fp8_hlo": 45,  # 24 s on an H200 (2026-11-27), before the step's compilation moved to a dumping process
    "attention": 40,  # 17 s on an H200 (2026-11-27)
    "train": 255,
    "offload_reach": 70,
    "profile": 35,
}
TOTAL_BUDGET_S = sum(STAGES.values())  # 500 s: under 9 minutes with the start-up around it
CATEGORIES = {  # op category -> pattern of the op (kernel) names it holds; first match wins
    "attention": r"fmha|flash|cudnn|attention|softmax",
    "host_transfers": r"memcpy|htod|dtoh|h2d|d2h|copy-start|copy-done|host",
    "collectives": r"nccl|all-reduce|all_reduce|all-gather|all_gather|reduce-scatter|collective|permute|all-to-all",
    "matmuls": r"gemm|cublas|matmul|\bdot|dot_|dot\.|cutlass|convolution|nvjet|xmma",  # nvjet: cuBLAS's Hopper GEMMs
    "optimizer": r"adam|optimizer|clip_by_global_norm|scale_by",
}
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")


# --- sizes ----------------------------------------------------------------------------------------


SMOKE_CASES = ((64, 8, 8, True, 4), (128, 8, 8, False, 4), (64, 8, 2, False, 1), (128, 8, 2, True, 1))
"""--cpu-smoke's numerics cases (head size, heads, kv heads, causal, ring members): every value once."""


def numerics_cases(chosen) -> list[tuple]:
    """(head size, heads, kv heads, causal, ring members): all of them, or `chosen`."""
    every = [
        (d, heads, kv, causal, members)
        for d in (64, 128)
        for heads, kv in ((8, 8), (8, 2))
        for causal in (True, False)
        for members in (1, 4)
    ]
    return list(chosen) if chosen else every


def sizes(cpu_smoke: bool) -> dict:
    """The sizes of a GPU run, or the tiny ones of --cpu-smoke (same code path)."""
    if cpu_smoke:
        return dict(
            presets=["tiny"], seqs=[128], precisions=["bf16", "fp8"], attention_seqs=[256], heads=(4, 2),
            check_seq=64, numerics_cases=SMOKE_CASES, reach_first=256, reach_limit=512, chunk=64, profile_seq=128,
            probe_s=120, run_s=180, peer="xla", planner_gpu="h100-80gb",
        )  # fmt: skip
    return dict(
        presets=["1b", "3b"], seqs=[8192, 32768, 65536], precisions=["bf16", "fp8"],
        attention_seqs=[8192, 16384, 32768, 65536], heads=(32, 8), check_seq=4096, numerics_cases=None,
        reach_first=65536, reach_limit=1 << 21, chunk=4096, profile_seq=8192, probe_s=45, run_s=90,
        peer="cudnn", planner_gpu=None,
    )  # fmt: skip


# --- numerics -------------------------------------------------------------------------------------


def emulated_ring(kernel, q, k, v, do, *, members: int, causal: bool):
    """The ring's algebra on one device: K/V in `members` blocks, each query block attends the
    blocks a ring step would bring (causal: earlier blocks unmasked, its own causally, later ones
    skipped), partials merged by log-sum-exp; the backward per block pair from the global output
    and log-sum-exp, dK/dV summed over query blocks."""
    import jax.numpy as jnp

    from longctx_trainer.ops.block import merge_partials

    n = q.shape[1] // members
    blocks = [slice(i * n, (i + 1) * n) for i in range(members)]
    outs, lses = [], []
    for i, qi in enumerate(blocks):
        out = jnp.zeros(q[:, qi].shape, jnp.float32)
        lse = jnp.full(q[:, qi].shape[:3], -jnp.inf, jnp.float32)
        for j, kj in enumerate(blocks):
            if causal and j > i:
                continue
            out, lse = merge_partials(out, lse, *kernel.forward(q[:, qi], k[:, kj], v[:, kj], causal and i == j))
        outs.append(out)
        lses.append(lse)
    out, lse = jnp.concatenate(outs, axis=1), jnp.concatenate(lses, axis=1)
    dq, dk, dv = jnp.zeros(q.shape, jnp.float32), jnp.zeros(k.shape, jnp.float32), jnp.zeros(v.shape, jnp.float32)
    for i, qi in enumerate(blocks):
        for j, kj in enumerate(blocks):
            if causal and j > i:
                continue
            dq_s, dk_s, dv_s = kernel.backward(
                q[:, qi], k[:, kj], v[:, kj], out[:, qi].astype(q.dtype), lse[:, qi], do[:, qi], causal and i == j
            )
            dq, dk, dv = dq.at[:, qi].add(dq_s), dk.at[:, kj].add(dk_s), dv.at[:, kj].add(dv_s)
    return out, dq, dk, dv


def numerics(cfg: dict, deadline: float = float("inf")) -> dict:
    """Worst error over scale of output and gradients, per case, against the fp32 reference;
    passes at bf16 tolerance (2^-7 + 2e-2 of the scale, as benchmarks/attention_gpu.py)."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from longctx_trainer.ops import reference_attention
    from longctx_trainer.ops.block_kernel import block_kernel

    seq, cases = cfg["check_seq"], []
    for head_dim, heads, kv_heads, causal, members in numerics_cases(cfg["numerics_cases"]):
        if time.monotonic() > deadline:
            cases.append(dict(head_dim=head_dim, heads=heads, kv_heads=kv_heads, causal=causal,
                              ring_members=members, skipped="stage budget spent"))  # fmt: skip
            continue
        keys = jax.random.split(jax.random.key(head_dim + heads + kv_heads), 4)
        q = jax.random.normal(keys[0], (1, seq, heads, head_dim), jnp.bfloat16)
        k, v = (jax.random.normal(x, (1, seq, kv_heads, head_dim), jnp.bfloat16) for x in keys[1:3])
        do = jax.random.normal(keys[3], q.shape, jnp.bfloat16)
        ref_out, vjp = jax.vjp(
            lambda *x, causal=causal: reference_attention(*x, causal=causal),
            *(x.astype(jnp.float32) for x in (q, k, v)),
        )
        expected = (ref_out, *vjp(do.astype(jnp.float32)))
        kernel = block_kernel(jnp.bfloat16, head_dim, scale=head_dim**-0.5)
        run = jax.jit(partial(emulated_ring, kernel, members=members, causal=causal))
        actual = run(q, k, v, do)
        errors = {}
        for label, a, e in zip(("out", "dq", "dk", "dv"), actual, expected, strict=True):
            a, e = np.asarray(a, np.float32), np.asarray(e)
            errors[label] = float(np.abs(a - e).max()) / float(np.abs(e).max())
        cases.append(
            dict(head_dim=head_dim, heads=heads, kv_heads=kv_heads, causal=causal, ring_members=members,
                 relative_error=errors, ok=all(x <= 2**-7 + 2e-2 for x in errors.values()))
        )  # fmt: skip
    return {"seq": seq, "cases": cases, "ok": all(c.get("ok", True) for c in cases)}


# --- FP8 HLO --------------------------------------------------------------------------------------

FP8_GEMM = "__cublas$lt$matmul$f8"  # cuBLASLt's FP8 GEMM custom call target
FP8_STEP_DUMP = "fp8-step-dump.tar.gz"
FP8_DOT = re.compile(r"= \S+ dot\(f8e(?:4m3fn|5m2)\[")  # a dot on FP8 operands (a Triton GEMM fusion's)


def fp8_gemms(text: str) -> dict:
    """FP8 GEMMs in a compiled program's text: cuBLASLt custom calls and dots on FP8 operands."""
    return {
        "custom_calls": sum(FP8_GEMM in line for line in text.splitlines()),
        "fp8_dots": len(FP8_DOT.findall(text)),
        "fp8_types": sorted(set(re.findall(r"f8e4m3fn|f8e5m2", text))),
    }


DUMPED_PASSES = "cublas-gemm-rewriter|simplify-fp-conversions"
"""The XLA passes whose input and output the fp8 step's dump keeps: the FP8 GEMM rewriter and
the excess-precision pass that folded the FP8 casts away before (trainer/fp8.py)."""


def compile_fp8_step(spec: dict) -> str:
    """The compiled text of the fp8 training step (no remat) of `spec`'s preset and length."""
    import jax
    import jax.numpy as jnp

    from longctx_trainer.mesh import make_mesh
    from longctx_trainer.train import StepFunctions

    config = _trainer_config(spec["preset"], spec["seq"], "fp8", "full", offload=False, chunk=None, steps=1)
    fns = StepFunctions(config, make_mesh(config.parallelism, jax.devices()[:1]))
    tokens = jax.ShapeDtypeStruct((1, config.sequence_length), jnp.int32)
    return fns.step.lower(fns.abstract_state(), tokens, tokens, None).compile().as_text()


def dumped_fp8_step(spec: dict, out: Path, limit_s: float) -> str:
    """Compiles the fp8 step in a process whose XLA dumps the step's program before and after its
    optimizations and around DUMPED_PASSES, packs the dump into `out`/FP8_STEP_DUMP (to read
    offline which dots stayed in bf16, and why) and returns the compiled text."""
    import tarfile
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        env = worker_env(dict(os.environ))
        env["XLA_FLAGS"] += (f" --xla_dump_to={folder} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*step.*"
                             f" --xla_dump_hlo_pass_re={DUMPED_PASSES}")  # fmt: skip
        command = [sys.executable, __file__, "--fp8-step", json.dumps(spec)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s, env=env)
        if done.returncode:
            raise RuntimeError(" / ".join(failure_lines(done.stderr or done.stdout)))
        with tarfile.open(out / FP8_STEP_DUMP, "w:gz") as archive:
            archive.add(folder, arcname="fp8-step")
        return done.stdout


def fp8_hlo(cfg: dict, out: Path, deadline: float) -> dict:
    """FP8 GEMMs in the compiled fp8 training step of the smallest preset (compiled in a process
    that dumps it, `dumped_fp8_step`), and in one matmul written two ways: fp8_einsum's
    (dequantized operands, trainer/fp8.py) and a dot straight on FP8 operands
    (`preferred_element_type`), so a miss shows which form this XLA takes."""
    import jax
    import jax.numpy as jnp

    from longctx_trainer import fp8

    spec = {"preset": cfg["presets"][0], "seq": cfg["check_seq"]}
    step = fp8_gemms(dumped_fp8_step(spec, out, max(1.0, deadline - time.monotonic())))
    x, w = jax.ShapeDtypeStruct((2048, 1024), jnp.bfloat16), jax.ShapeDtypeStruct((1024, 2048), jnp.bfloat16)

    def einsum(x, w):
        return jax.grad(lambda x, w: fp8.fp8_einsum("td,df->tf", x, w, fp8.einsum_state()).sum(), (0, 1))(x, w)

    def direct(x, w):
        xq, wq = x.astype(fp8.E4M3), w.astype(fp8.E4M3)
        return jax.lax.dot_general(xq, wq, (((1,), (0,)), ((), ())), preferred_element_type=jnp.bfloat16)

    forms = {name: fp8_gemms(jax.jit(f).lower(x, w).compile().as_text()) for name, f in
             (("fp8_einsum", einsum), ("direct", direct))}  # fmt: skip
    found = step["custom_calls"] + step["fp8_dots"]
    return {
        "step": step,
        "forms": forms,
        "backend": jax.default_backend(),
        "ok": found > 0 if jax.default_backend() == "gpu" else "f8e4m3fn" in step["fp8_types"],
    }


# --- attention benchmark --------------------------------------------------------------------------


def attention(cfg: dict, deadline: float) -> dict:
    """fwd+bwd time of longctx's attention (context 1) and of the peer (cuDNN on a GPU) per length."""
    import jax
    from attention_gpu import _grads, _inputs, _time

    from longctx_trainer.contract.config import ParallelConfig
    from longctx_trainer.mesh import make_mesh
    from longctx_trainer.ops import context_parallel_attention

    heads, kv_heads = cfg["heads"]
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    rows = []
    for seq in cfg["attention_seqs"]:
        if time.monotonic() > deadline:
            rows.append({"seq": seq, "skipped": "stage budget spent"})
            continue
        q, k, v, do = _inputs(seq, heads, kv_heads)
        peer = _grads(lambda q, k, v: jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation=cfg["peer"]))
        ours = _grads(lambda q, k, v: context_parallel_attention(q, k, v, mesh=mesh, causal=True))
        peer_s, ours_s = _time(peer, (q, k, v, do), 3), _time(ours, (q, k, v, do), 3)
        rows.append({"seq": seq, "peer": cfg["peer"], "peer_ms": peer_s * 1e3, "longctx_ms": ours_s * 1e3,
                     "ratio": ours_s / peer_s})  # fmt: skip
    return {"heads": heads, "kv_heads": kv_heads, "rows": rows}


# --- training runs (each in a capped subprocess) --------------------------------------------------


def _trainer_config(preset, seq, precision, policy, *, offload, chunk, steps):
    from longctx_trainer.contract.config import OffloadConfig, OptimizerConfig, TrainerConfig
    from longctx_trainer.contract.presets import PRESETS

    return TrainerConfig(
        model=PRESETS[preset],
        sequence_length=seq,
        global_batch_tokens=seq,
        steps=steps,
        precision=precision,
        remat_policy=policy,
        offload=OffloadConfig(enabled=offload, chunk_tokens=min(chunk, seq) if offload else None),
        optimizer=OptimizerConfig(warmup_steps=1),
    )


def run_one(spec: dict) -> dict:
    """One training run (the worker side): median step seconds and tokens/s of the steps after
    the first, MFU, and the device's peak memory (None where the backend does not report it)."""
    import statistics

    import jax

    from longctx_trainer.contract.metrics import TrainMetrics
    from longctx_trainer.mesh import make_mesh
    from longctx_trainer.peak import fp8_peak_flops, peak_flops
    from longctx_trainer.train import train

    config = _trainer_config(**spec)
    device = jax.devices()[0]
    events: list[dict] = []
    try:
        train(
            config,
            make_mesh(config.parallelism, [device]),
            emit=events.append,
            metrics=TrainMetrics("gpu-check", 0),
            peak_flops_per_device=peak_flops(device),
            fp8_peak_flops_per_device=fp8_peak_flops(device) if config.precision == "fp8" else None,
        )
    except jax.errors.JaxRuntimeError as error:
        if any(marker in str(error) for marker in OOM_MARKERS):
            return {"status": "oom"}
        raise
    steps = [e for e in events if e["event"] == "step"][1:]
    stats = device.memory_stats() or {}
    return {
        "status": "ok",
        "step_seconds": statistics.median(e["step_seconds"] for e in steps),
        "tokens_per_second": statistics.median(e["tokens_per_second"] for e in steps),
        "mfu": statistics.median(e["mfu"] for e in steps),
        "peak_bytes": stats.get("peak_bytes_in_use"),
        "device": device.device_kind,
    }


PREALLOCATE = "XLA_PYTHON_CLIENT_PREALLOCATE"
"""Off in this script's own process: JAX otherwise reserves 75% of the GPU at start, and every
worker then had a quarter of it (seen on an H200, 2026-11-27: the 3b preset out of memory at 8K)."""


def worker_env(parent: dict) -> dict:
    """A training run's environment: a trainer pod's GPU settings (the operator's memory fraction
    and XLA flags, operator/render/env.py), reserving memory at start as a pod does."""
    from longctx_operator.render.env import GPU_MEMORY_FRACTION, GPU_XLA_FLAGS
    from longctx_trainer.contract import podenv

    env = {k: v for k, v in parent.items() if k != PREALLOCATE}
    env[podenv.GPU_MEMORY_FRACTION] = GPU_MEMORY_FRACTION
    env[podenv.XLA_FLAGS] = " ".join([parent.get(podenv.XLA_FLAGS, ""), *GPU_XLA_FLAGS]).strip()
    return env


def spawn(spec: dict, limit_s: float) -> dict:
    """run_one in a fresh process (a clean peak-memory counter, an OOM that cannot poison the
    next run) with a time cap, in a pod's environment (`worker_env`)."""
    command = [sys.executable, __file__, "--worker", json.dumps(spec)]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=max(1.0, limit_s), env=worker_env(dict(os.environ))
        )
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "limit_s": round(limit_s, 1)}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"status": "error", "returncode": done.returncode, "error": failure_lines(done.stderr or done.stdout)}
    return json.loads(lines[-1])


def failure_lines(text: str, keep: int = 8) -> list[str]:
    """The last `keep` lines of a failed run's output that say something: a native crash prints its
    message (a fatal "Check failed", a signal) before a stack of "@ 0x..." frames, which are
    dropped, as are blank lines."""
    said = [line.rstrip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("@ ")]
    return [line[:300] for line in said[-keep:]]


def train_runs(cfg: dict) -> list[dict]:
    """The runs, most wanted first: the largest preset's bf16 runs (remat policy save_attention)
    at every length with its fp8 run at the shortest (the FP8 goal's point) beside them, then the
    other presets' same runs, then the rest (full remat, fp8 at the longer lengths)."""
    runs = [
        dict(preset=preset, seq=seq, precision=precision, policy=policy)
        for seq in cfg["seqs"]
        for preset in cfg["presets"]
        for precision, policy in (("bf16", "save_attention"), ("bf16", "full"), ("fp8", "save_attention"))
        if precision in cfg["precisions"] and policy in cfg.get("policies", (policy,))
    ]
    largest, shortest = cfg["presets"][-1], min(cfg["seqs"])

    def priority(run):
        wanted = run["policy"] == "save_attention" and (run["precision"] == "bf16" or run["seq"] == shortest)
        return (not wanted, run["preset"] != largest, run["seq"], run["precision"] != "bf16")

    return sorted(runs, key=priority)


def training(cfg: dict, deadline: float, planner: Callable[[dict], dict]) -> dict:
    rows = []
    for run in train_runs(cfg):
        left = deadline - time.monotonic()
        if left < 5:
            rows.append({**run, "status": "skipped", "reason": "stage budget spent"})
            continue
        spec = dict(run, offload=False, chunk=None, steps=3)
        measured = spawn(spec, min(cfg["run_s"], left))
        rows.append({**run, **measured, "planner": planner(spec)})
    return {"rows": rows}


def offload_reach(cfg: dict, deadline: float) -> dict:
    """Longest trainable sequence of the smallest preset, offload off and on: doubling from
    `reach_first` until a probe fails, then bisecting (in multiples of the chunk) between the last
    success and the failure; each probe capped (a probe past its cap counts as a failure)."""
    result = {}
    for offload in (False, True):
        probes = []

        def fits(seq, offload=offload, probes=probes):
            left = deadline - time.monotonic()
            if left < 5:
                return None
            spec = dict(preset=cfg["presets"][0], seq=seq, precision="bf16", policy="full", offload=offload,
                        chunk=cfg["chunk"], steps=2)  # fmt: skip
            status = spawn(spec, min(cfg["probe_s"], left))["status"]
            probes.append({"seq": seq, "status": status})
            return status == "ok"

        best, seq, failed = None, cfg["reach_first"], None
        while seq <= cfg["reach_limit"]:
            ok = fits(seq)
            if not ok:
                failed = seq if ok is False else None
                break
            best, seq = seq, seq * 2
        step = 2 * cfg["chunk"]
        while best and failed and failed - best > step:
            middle = (best + failed) // 2 // step * step
            ok = fits(middle)
            if ok is None:
                break
            best, failed = (middle, failed) if ok else (best, middle)
        result["on" if offload else "off"] = {"longest": best, "probes": probes}
    off, on = result["off"]["longest"], result["on"]["longest"]
    result["extension"] = on / off if off and on else None
    return result


# --- profile --------------------------------------------------------------------------------------


def categorize(name: str) -> str:
    lowered = name.lower()
    return next((c for c, pattern in CATEGORIES.items() if re.search(pattern, lowered)), "other")


def trace_summary(trace: dict) -> dict:
    """Time per op category from a Perfetto/Chrome trace: the complete events of the device
    processes (names containing "/device:"), or of every process where there is none (CPU)."""
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    devices = {pid for pid, name in processes.items() if "/device:" in name}
    totals: dict[str, float] = dict.fromkeys([*CATEGORIES, "other"], 0.0)
    ops: dict[str, float] = {}
    for e in events:
        if e.get("ph") != "X" or "dur" not in e or (devices and e["pid"] not in devices):
            continue
        if not devices and e["name"].startswith("$"):  # host-side Python frames
            continue
        totals[categorize(e["name"])] += e["dur"] / 1e3
        ops[e["name"]] = ops.get(e["name"], 0.0) + e["dur"] / 1e3
    whole = sum(totals.values()) or 1.0
    top = sorted(ops.items(), key=lambda x: -x[1])[:10]
    return {
        "source": "device" if devices else "host",
        "ms": {k: round(v, 3) for k, v in totals.items()},
        "fraction": {k: round(v / whole, 4) for k, v in totals.items()},
        "top_ops": [{"name": n[:120], "ms": round(ms, 3), "category": categorize(n)} for n, ms in top],
    }


def profile(cfg: dict, out: Path) -> dict:
    """Two steps of the smallest preset, the second traced."""
    import jax
    import jax.numpy as jnp

    from longctx_trainer.mesh import make_mesh
    from longctx_trainer.train import StepFunctions

    config = _trainer_config(cfg["presets"][0], cfg["profile_seq"], "bf16", "save_attention", offload=False,
                             chunk=None, steps=2)  # fmt: skip
    fns = StepFunctions(config, make_mesh(config.parallelism, jax.devices()[:1]))
    tokens = jnp.zeros((1, config.sequence_length), jnp.int32)
    state, _ = jax.block_until_ready(fns.step(fns.init(jax.random.key(0)), tokens, tokens, None))
    traces = out / "profile"
    with jax.profiler.trace(str(traces), create_perfetto_trace=True):
        jax.block_until_ready(fns.step(state, tokens, tokens, None))
    path = sorted(traces.rglob("perfetto_trace.json.gz"))[-1]
    return {"trace": str(path.relative_to(out)), **trace_summary(json.loads(gzip.decompress(path.read_bytes())))}


# --- planner beside the measurements --------------------------------------------------------------


def planner_prediction(cfg: dict, device_kind: str | None) -> Callable[[dict], dict]:
    """f(run spec) -> the planner's peak memory and step time for that run on this GPU (on CPU:
    cfg's stand-in GPU, for the structure only)."""
    from longctx_operator.planner import PlanError, PlanRequest, plan
    from longctx_trainer.contract.hardware import gpu_of_device_kind
    from longctx_trainer.contract.presets import PRESETS

    known = gpu_of_device_kind(device_kind) if device_kind else None
    gpu = known.name if known else cfg["planner_gpu"]

    def predict(spec: dict) -> dict:
        if gpu is None:
            return {"error": f"device {device_kind!r} is not in the hardware catalogue"}
        request = PlanRequest(
            model=PRESETS[spec["preset"]], sequence_length=spec["seq"], global_batch_tokens=spec["seq"], nodes=1,
            gpus_per_node=1, gpu=gpu, fabric="infiniband", precision=spec["precision"], data=1, context=1, tensor=1,
            offload=spec["offload"], chunk_tokens=spec["chunk"] if spec["offload"] else None,
            remat_policy=spec["policy"],
        )  # fmt: skip
        try:
            planned = plan(request)
        except PlanError as error:
            return {"gpu": gpu, "error": error.message}
        return {"gpu": gpu, "peak_bytes": planned.chosen.memory.total, "step_seconds": planned.step_seconds}

    return predict


def planner_vs_measured(train: dict) -> list[dict]:
    """Measured over predicted, per run measured on a catalogued GPU."""
    rows = []
    for row in train.get("rows", []):
        predicted = row.get("planner") or {}
        if row.get("status") != "ok" or "step_seconds" not in predicted:
            continue
        peak = row.get("peak_bytes")
        rows.append({
            "run": f"{row['preset']} {row['seq']} {row['precision']} {row['policy']}",
            "predicted_peak_bytes": predicted["peak_bytes"], "measured_peak_bytes": peak,
            "memory_ratio": predicted["peak_bytes"] / peak if peak else None,
            "predicted_step_seconds": predicted["step_seconds"], "measured_step_seconds": row["step_seconds"],
            "step_ratio": predicted["step_seconds"] / row["step_seconds"],
        })  # fmt: skip
    return rows


# --- driver ---------------------------------------------------------------------------------------


def summary(results: dict) -> str:
    """The results file as readable Markdown."""
    lines = [f"# gpu-check {results['started']}", "", f"device: {results['device']}, jax {results['jax']}", ""]
    for name, stage in results["stages"].items():
        lines.append(f"## {name}: {stage['status']} ({stage['seconds']:.0f} s of {stage['budget_s']} s)")
        if stage["status"] != "ok":
            lines.append(f"    {stage.get('error', '')}")
        lines.append("")
    train = results["stages"].get("train", {}).get("result", {})
    if train:
        lines += [
            "| run | status | tokens/s | MFU | step s | peak GiB | planner step s | planner GiB |",
            "|" + "---|" * 8,
        ]
        for r in train["rows"]:
            p = r.get("planner") or {}

            def gib(x):
                return f"{x / 2**30:.1f}" if x else "-"

            lines.append(
                f"| {r['preset']} {r['seq']} {r['precision']} {r['policy']} | {r['status']} "
                f"| {r.get('tokens_per_second', 0):.0f} | {r.get('mfu', 0):.3f} | {r.get('step_seconds', 0):.3f} "
                f"| {gib(r.get('peak_bytes'))} | {p.get('step_seconds', 0):.3f} | {gib(p.get('peak_bytes'))} |"
            )
        failed = [r for r in train["rows"] if r.get("error")]
        lines += ["", *(f"- {r['preset']} {r['seq']} {r['precision']} {r['policy']}: "
                        + " / ".join(r["error"]) for r in failed)]  # fmt: skip
    fp8_result = results["stages"].get("fp8_hlo", {}).get("result")
    if fp8_result:
        forms = "; ".join(f"{k} {v}" for k, v in fp8_result["forms"].items())
        lines += ["", f"fp8: step {fp8_result['step']}; {forms}"]
    profile_result = results["stages"].get("profile", {}).get("result")
    if profile_result:
        lines += ["", "profile (ms): " + ", ".join(f"{k} {v}" for k, v in profile_result["ms"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=False, help="folder of the results file")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on CPU: checks every stage's code path")
    parser.add_argument("--stages", nargs="+", choices=list(STAGES), default=list(STAGES))
    parser.add_argument(
        "--budget",
        action="append",
        default=[],
        metavar="STAGE=SECONDS",
        help="another budget for a stage (a shorter second run of a session)",
    )
    parser.add_argument("--seqs", type=int, nargs="+", help="the training runs' lengths (default: the sizes')")
    parser.add_argument("--presets", nargs="+", help="the training runs' presets (default: the sizes')")
    parser.add_argument("--policies", nargs="+", choices=["full", "save_attention"], help="the runs' remat policies")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one training run (JSON spec), for spawn
    parser.add_argument("--fp8-step", help=argparse.SUPPRESS)  # compile the fp8 step (JSON spec), for fp8_hlo
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(run_one(json.loads(args.worker))), flush=True)
        return {}
    if args.fp8_step:
        print(compile_fp8_step(json.loads(args.fp8_step)), flush=True)
        return {}
    os.environ.setdefault(PREALLOCATE, "false")  # before JAX starts: the workers get the GPU
    import jax

    if not args.cpu_smoke and jax.default_backend() != "gpu":
        sys.exit(f"benchmarks/gpu_check.py needs a GPU (backend {jax.default_backend()!r}); use --cpu-smoke")
    cfg, out = sizes(args.cpu_smoke), args.out
    cfg.update({k: v for k, v in (("seqs", args.seqs), ("presets", args.presets), ("policies", args.policies)) if v})
    budgets = {**STAGES, **budget_overrides(args.budget)}
    out.mkdir(parents=True, exist_ok=True)
    device = jax.devices()[0]
    scale = 1.0 if not args.cpu_smoke else 4.0  # a CPU is slower at compiling than the budgets assume
    results = {
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu_smoke": args.cpu_smoke,
        "device": device.device_kind,
        "jax": jax.__version__,
        "budget_s": sum(budgets[name] for name in args.stages),
        "stages": {},
    }
    end = time.monotonic() + sum(budgets[name] for name in args.stages) * scale
    predict = planner_prediction(cfg, None if args.cpu_smoke else device.device_kind)
    for name in args.stages:
        budget = budgets[name]
        begin = time.monotonic()
        deadline = min(begin + budget * scale, end)  # and never past the whole run's budget
        work = {
            "numerics": lambda d=deadline: numerics(cfg, d),
            "fp8_hlo": lambda d=deadline: fp8_hlo(cfg, out, d),
            "attention": lambda d=deadline: attention(cfg, d),
            "train": lambda d=deadline: training(cfg, d, predict),
            "offload_reach": lambda d=deadline: offload_reach(cfg, d),
            "profile": lambda: profile(cfg, out),
        }[name]
        try:
            stage = {"status": "ok", "result": work()}
        except Exception as error:  # noqa: BLE001 -- a failed stage is a result; the others still run
            stage = {"status": "error", "error": f"{type(error).__name__}: {str(error)[:500]}"}
        stage.update(seconds=time.monotonic() - begin, budget_s=budget)
        results["stages"][name] = stage
        print(f"== {name}: {stage['status']} in {stage['seconds']:.0f} s", flush=True)
        if name == "train" and stage["status"] == "ok":
            results["planner_vs_measured"] = planner_vs_measured(stage["result"])
        write(results, out)  # after every stage: a run cut short keeps what it measured
    return results


def budget_overrides(pairs: list[str]) -> dict[str, int]:
    """{"train": 120} from ["train=120"]; a stage not in STAGES or a bad number is an error."""
    found = {}
    for pair in pairs:
        name, _, seconds = pair.partition("=")
        if name not in STAGES or not seconds.isdigit():
            raise SystemExit(f"--budget {pair!r}: expected STAGE=SECONDS with STAGE one of {', '.join(STAGES)}")
        found[name] = int(seconds)
    return found


def write(results: dict, out: Path) -> None:
    (out / RESULTS_FILE).write_text(json.dumps(results, indent=1, default=str))
    (out / SUMMARY_FILE).write_text(summary(results))


if __name__ == "__main__":
    main()
