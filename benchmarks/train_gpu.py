"""Training throughput of the 1b preset on one GPU, with and without offload.

    python benchmarks/train_gpu.py [--seqs 8192 16384 32768 65536 131072] [--steps 4]
    python benchmarks/train_gpu.py --precision bf16 fp8   # FP8 beside bf16, same run
    python benchmarks/train_gpu.py --cpu-smoke      # tiny model, same code, on CPU (FP8 emulated)

Part 1: for each sequence length and precision, tokens/s and MFU (causal convention, against the
bf16 dense peak of the device; fp8 rows also against the FP8 peak) of full training steps (batch
of one sequence, remat), offload off and on, and fp8's speed-up over bf16 at the same point. A
length that runs out of device memory is reported as OOM.
Part 2: the longest sequence that trains at all, offload off and on (first precision): doubling
from the first length until a step runs out of memory (or --max-seq).

Every measurement is a real `longctx_trainer.train.train` run (the loop the pods run), timed by
its own step events; the first step after compilation is dropped, the median of the rest kept.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys

import jax

from longctx_trainer.contract.config import ModelConfig, OffloadConfig, OptimizerConfig, ParallelConfig, TrainerConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.contract.presets import preset
from longctx_trainer.mesh import make_mesh
from longctx_trainer.peak import fp8_peak_flops, peak_flops
from longctx_trainer.train import train

OOM_MARKERS = ("RESOURCE_EXHAUSTED", "Out of memory", "out of memory")


def _config(model: ModelConfig, seq: int, offload: bool, steps: int, chunk: int, precision: str) -> TrainerConfig:
    return TrainerConfig(
        model=model,
        sequence_length=seq,
        global_batch_tokens=seq,
        steps=steps,
        precision=precision,
        remat=True,
        parallelism=ParallelConfig(),
        offload=OffloadConfig(enabled=offload, chunk_tokens=min(chunk, seq) if offload else None),
        optimizer=OptimizerConfig(warmup_steps=1),
    )


def measure(config: TrainerConfig, peak: float, fp8_peak: float | None = None) -> dict | None:
    """Median tokens/s and MFU of the steps after the first, or None when out of memory."""
    events: list[dict] = []
    try:
        train(
            config,
            make_mesh(config.parallelism, jax.devices()[:1]),
            emit=events.append,
            metrics=TrainMetrics("benchmark", 0),
            peak_flops_per_device=peak,
            fp8_peak_flops_per_device=fp8_peak if config.precision == "fp8" else None,
        )
    except jax.errors.JaxRuntimeError as error:
        if not any(marker in str(error) for marker in OOM_MARKERS):
            raise
        return None
    finally:
        jax.clear_caches()
        gc.collect()
    steps = [e for e in events if e["event"] == "step"][1:]
    return {
        "tokens_per_second": statistics.median(e["tokens_per_second"] for e in steps),
        "mfu": statistics.median(e["mfu"] for e in steps),
    }


def longest(
    model: ModelConfig, first: int, limit: int, offload: bool, chunk: int, precision: str, peak: float
) -> int | None:
    """Longest power-of-two multiple of `first` (up to `limit`) whose training steps fit."""
    best, seq = None, first
    while seq <= limit:
        if measure(_config(model, seq, offload, 2, chunk, precision), peak) is None:
            break
        best, seq = seq, seq * 2
    return best


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--cpu-smoke", action="store_true", help="tiny model and short sequences on CPU (checks the code path)"
    )
    parser.add_argument("--seqs", type=int, nargs="+")
    parser.add_argument("--steps", type=int, default=4, help="steps per measurement (>= 2)")
    parser.add_argument(
        "--chunk-tokens", type=int, default=4096, help="FPDT chunk size when offloading (16K OOMed at 32K on an H200)"
    )
    parser.add_argument("--max-seq", type=int, help="stop the longest-sequence search here")
    parser.add_argument("--skip-longest", action="store_true", help="part 1 only (no longest-sequence search)")
    parser.add_argument(
        "--precision", nargs="+", choices=["bf16", "fp8"], default=["bf16"], help="one row per precision (fp8: vs bf16)"
    )
    args = parser.parse_args(argv)

    precisions = args.precision
    if args.cpu_smoke:
        model = preset("tiny")
        seqs, chunk, limit = args.seqs or [256, 512], min(args.chunk_tokens, 128), args.max_seq or 1024
    else:
        if jax.default_backend() != "gpu":
            sys.exit(
                f"benchmarks/train_gpu.py needs a GPU (JAX backend is "
                f"{jax.default_backend()!r}); use --cpu-smoke to exercise the code on CPU."
            )
        model = preset("1b")
        seqs = args.seqs or [8192, 16384, 32768, 65536, 131072]
        chunk, limit = args.chunk_tokens, args.max_seq or 1 << 20

    device = jax.devices()[0]
    peak, fp8_peak = peak_flops(device), fp8_peak_flops(device)
    print(
        f"device: {device.device_kind} ({jax.default_backend()}), bf16 peak {peak / 1e12:.1f} TFLOP/s, "
        f"FP8 peak {f'{fp8_peak / 1e12:.1f} TFLOP/s' if fp8_peak else 'none (emulated)'}; model {model.preset}, "
        f"{args.steps} steps per point"
    )
    print(f"{'sequence':>9} {'offload':>8} {'precision':>9} {'tokens/s':>12} {'MFU':>7} {'MFU fp8':>8} {'vs bf16':>8}")
    for seq in seqs:
        for offload in (False, True):
            speeds = {}
            for precision in precisions:
                result = measure(_config(model, seq, offload, args.steps, chunk, precision), peak, fp8_peak)
                speeds[precision] = result and result["tokens_per_second"]
                cells = ["OOM", "", "", ""]
                if result is not None:
                    fp8_mfu = result["mfu"] * peak / fp8_peak if precision == "fp8" and fp8_peak else None
                    ratio = speeds[precision] / speeds["bf16"] if precision != "bf16" and speeds.get("bf16") else None
                    cells = [
                        f"{result['tokens_per_second']:.0f}",
                        f"{result['mfu']:.3f}",
                        f"{fp8_mfu:.3f}" if fp8_mfu else "-",
                        f"{ratio:.2f}x" if ratio else "-",
                    ]
                print(
                    f"{seq:>9} {'on' if offload else 'off':>8} {precision:>9} {cells[0]:>12} {cells[1]:>7} "
                    f"{cells[2]:>8} {cells[3]:>8}",
                    flush=True,
                )
    for offload in () if args.skip_longest else (False, True):
        best = longest(model, seqs[0], limit, offload, chunk, precisions[0], peak)
        print(
            f"longest sequence that trains, offload {'on' if offload else 'off'}: "
            f"{best if best else f'none (even {seqs[0]} runs out of memory)'}"
            f"{' (search limit)' if best == limit else ''}",
            flush=True,
        )


if __name__ == "__main__":
    main()
