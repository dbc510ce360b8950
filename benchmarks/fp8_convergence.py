"""Does FP8 training track bf16? A small model trained byte-level on this repository's docs.

    python benchmarks/fp8_convergence.py [--steps 200] [--contexts 1 4]

For each context-parallel degree, the same run (model, data, seed, schedule) in bf16 and in fp8
(layer matmuls in FP8 with delayed scaling, longctx_trainer.fp8): the first training loss, the
mean of the last 10, the largest after the warm-up (a divergence shows there), and the final
loss: the trained model's mean loss on 16 fixed evaluation batches (windows the training order
does not visit in that order: another data seed), the same batches for every run, so a batch's
own difficulty does not move the comparison; fp8's final loss relative to bf16's. On a CPU FP8
is emulated: the rounding is FP8's, the speed is not.
Needs 8 host devices on a CPU (XLA_FLAGS=--xla_force_host_platform_device_count=8, set here).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")

import jax  # noqa: E402  (after the device count is set)
import numpy as np  # noqa: E402

from longctx_trainer.contract.config import (  # noqa: E402
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.contract.metrics import TrainMetrics  # noqa: E402
from longctx_trainer.data import Batches  # noqa: E402
from longctx_trainer.mesh import make_mesh  # noqa: E402
from longctx_trainer.train import StepFunctions, train  # noqa: E402

DOCS = Path(__file__).resolve().parents[1] / "docs"
WARMUP = 20
EVAL_BATCHES = 16
EVAL_DATA_SEED = 2


def run(precision: str, context: int, steps: int) -> tuple[list[float], float]:
    """The training losses of every step, and the trained model's mean loss on the evaluation set."""
    config = TrainerConfig(
        model=ModelConfig(layers=4, hidden=128, heads=8, kv_heads=2, ffn=384, vocab=256),
        sequence_length=256,
        global_batch_tokens=1024,
        steps=steps,
        precision=precision,
        parallelism=ParallelConfig(context=context),
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=WARMUP),
        data=DataConfig(kind="text", path=str(DOCS), seed=1),
        seed=3,
    )
    mesh = make_mesh(config.parallelism, jax.devices()[:context])
    fns = StepFunctions(config, mesh)
    events: list[dict] = []
    state = train(
        config, mesh, emit=events.append, metrics=TrainMetrics("benchmark", 0), peak_flops_per_device=1e12, fns=fns
    )
    evaluation_data = config.data.model_copy(update={"seed": EVAL_DATA_SEED})
    held_out = Batches(config.model_copy(update={"data": evaluation_data}), mesh)
    loss = jax.jit(fns.model.loss)
    evaluated = np.mean([float(loss(state["params"], *held_out.for_step(i))) for i in range(EVAL_BATCHES)])
    return [e["loss"] for e in events if e["event"] == "step"], float(evaluated)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--contexts", type=int, nargs="+", default=[1, 4])
    args = parser.parse_args(argv)
    print(f"{args.steps} steps, byte-level {DOCS.name}/, backend {jax.default_backend()}")
    print(
        f"{'context':>7} {'precision':>9} {'first':>7} {'last 10':>7} {'max after warm-up':>18} "
        f"{'final (eval)':>12} {'fp8/bf16':>9} {'s':>6}"
    )
    for context in args.contexts:
        final = {}
        for precision in ("bf16", "fp8"):
            begin = time.perf_counter()
            curve, final[precision] = run(precision, context, args.steps)
            seconds = time.perf_counter() - begin
            worst = max(curve[WARMUP:], default=float("nan"))
            ratio = f"{final['fp8'] / final['bf16'] - 1:+.2%}" if precision == "fp8" else "-"
            print(
                f"{context:>7} {precision:>9} {curve[0]:>7.3f} {np.mean(curve[-10:]):>7.3f} "
                f"{worst:>18.3f} {final[precision]:>12.3f} {ratio:>9} {seconds:>6.0f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
