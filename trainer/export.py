"""`python -m longctx_trainer.export --config FILE --output DIR`: a job's checkpoint as a Hugging
Face Llama model (config.json + safetensors), ready for transformers, vLLM or another run's
`initFrom`.

It runs on one host, on one device of the default backend (CPU works): the checkpoint's train
state is restored resharded onto that device (orbax), so the host needs the state's size in
memory (16 bytes per parameter: fp32 weights and two Adam moments; 128 GB for an 8B model), and
only the parameters are written.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np

from .checkpoint import Checkpoints
from .config import OffloadConfig, ParallelConfig, TrainerConfig, load_config
from .mesh import make_mesh
from .train import StepFunctions
from .weights import save_hf_checkpoint

DTYPES = ("bfloat16", "float16", "float32")


class ExportError(ValueError):
    pass


def export_checkpoint(config: TrainerConfig, output: str | Path, *, step: int | None = None,
                      dtype: str = "bfloat16", max_shard_bytes: int = 5 * 2**30) -> tuple[int, list[Path]]:
    """Writes checkpoint `step` (default: the latest) of the job configured by `config`; returns the
    step and the safetensors files written."""
    if not config.checkpoint.path:
        raise ExportError("the config has no checkpoint.path")
    single = config.model_copy(update={"parallelism": ParallelConfig(load_balance="none"),
                                       "offload": OffloadConfig()})
    fns = StepFunctions(single, make_mesh(single.parallelism, jax.devices()[:1]))
    checkpoints = Checkpoints(config.checkpoint)
    try:
        steps = checkpoints.manager.all_steps()
        if not steps:
            raise ExportError(f"no checkpoint in {config.checkpoint.path}")
        step = max(steps) if step is None else step
        if step not in steps:
            raise ExportError(f"no checkpoint of step {step} in {config.checkpoint.path}; "
                              f"there are {', '.join(map(str, sorted(steps)))}")
        state, _ = checkpoints.restore(step, fns.abstract_state())
    finally:
        checkpoints.close()
    params = jax.tree.map(np.asarray, state["params"])
    files = save_hf_checkpoint(params, config.model.dims(), output, dtype=dtype,
                               max_positions=config.sequence_length, max_shard_bytes=max_shard_bytes)
    return step, files


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m longctx_trainer.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="the job's TrainerConfig YAML")
    parser.add_argument("--output", required=True, type=Path, help="directory for the Hugging Face files")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the latest)")
    parser.add_argument("--dtype", default="bfloat16", choices=DTYPES)
    args = parser.parse_args(argv)
    try:
        step, files = export_checkpoint(load_config(args.config), args.output, step=args.step, dtype=args.dtype)
    except (OSError, ValueError) as error:
        raise SystemExit(f"longctx_trainer.export: {error}") from None
    print(f"step {step} -> {args.output} ({len(files)} safetensors file{'s' if len(files) > 1 else ''}, {args.dtype})")


if __name__ == "__main__":
    main()
