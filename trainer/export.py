"""`python -m longctx_trainer.export --config FILE --output DIR`: a job's checkpoint as a Hugging
Face Llama model (config.json + safetensors), ready for transformers, vLLM or another run's
`initFrom`.

It runs on one host's CPU (also on a GPU host: the state would not fit one GPU): the
checkpoint's train state is restored resharded onto one CPU device (orbax), so the host needs
the state's size in memory (12 bytes per parameter: fp32 weights and two Adam moments; 96 GB
for an 8B model), and only the parameters are written. The token ids of config.json (bos, eos,
pad) are those of the checkpoint the job started from (`init_from`, which must then be readable),
or of `--token-ids-from`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np

from . import hfconfig
from .checkpoint import Checkpoints
from .contract.config import OffloadConfig, ParallelConfig, TrainerConfig, load_config
from .mesh import make_mesh
from .train import StepFunctions
from .weights import EXPORT_DTYPES, require_empty, save_hf_checkpoint


class ExportError(ValueError):
    pass


def export_checkpoint(
    config: TrainerConfig,
    output: str | Path,
    *,
    step: int | None = None,
    dtype: str = "bfloat16",
    max_shard_bytes: int = 5 * 2**30,
    token_ids_from: str | Path | None = None,
) -> tuple[int, list[Path]]:
    """Writes checkpoint `step` (default: the latest) of the job configured by `config`; returns the
    step and the safetensors files written. The bos/eos/pad token ids come from the config.json in
    `token_ids_from` (default: the job's init_from)."""
    if not config.checkpoint.path:
        raise ExportError("the config has no checkpoint.path")
    # Everything that can be refused is checked before the restore, which takes minutes for a large model.
    require_empty(output)
    token_ids = _token_ids(token_ids_from or config.init_from)
    single = config.model_copy(update={"parallelism": ParallelConfig(load_balance="none"), "offload": OffloadConfig()})
    fns = StepFunctions(single, make_mesh(single.parallelism, jax.devices("cpu")[:1]))
    checkpoints = Checkpoints(config.checkpoint)
    try:
        steps = checkpoints.manager.all_steps()
        if not steps:
            raise ExportError(f"no checkpoint in {config.checkpoint.path}")
        step = max(steps) if step is None else step
        if step not in steps:
            raise ExportError(
                f"no checkpoint of step {step} in {config.checkpoint.path}; "
                f"there are {', '.join(map(str, sorted(steps)))}"
            )
        state, _ = checkpoints.restore(step, fns.abstract_state())
    finally:
        checkpoints.close()
    params = jax.tree.map(np.asarray, state["params"])
    files = save_hf_checkpoint(
        params,
        config.model,
        output,
        dtype=dtype,
        max_positions=config.sequence_length,
        max_shard_bytes=max_shard_bytes,
        token_ids=token_ids,
    )
    return step, files


def _token_ids(source: str | Path | None) -> dict:
    """Without them transformers assumes ids 1 and 2, which are wrong for Llama 3 (128000, 128001)."""
    if not source:
        return {}  # trained from scratch: no tokenizer to take them from
    try:
        return hfconfig.token_ids(hfconfig.read(source))
    except hfconfig.HfConfigError:
        raise ExportError(
            f"the token ids come from {Path(source) / hfconfig.FILE}, which cannot be read: mount the weights "
            f"the job started from there, or name another checkpoint with --token-ids-from"
        ) from None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m longctx_trainer.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", required=True, type=Path, help="the job's TrainerConfig YAML")
    parser.add_argument("--output", required=True, type=Path, help="directory for the Hugging Face files")
    parser.add_argument("--step", type=int, help="checkpoint step (default: the latest)")
    parser.add_argument("--dtype", default="bfloat16", choices=list(EXPORT_DTYPES))
    parser.add_argument(
        "--token-ids-from",
        type=Path,
        metavar="DIR",
        help="Hugging Face checkpoint whose bos/eos/pad ids to keep (default: the job's init_from)",
    )
    args = parser.parse_args(argv)
    try:
        step, files = export_checkpoint(
            load_config(args.config), args.output, step=args.step, dtype=args.dtype, token_ids_from=args.token_ids_from
        )
    except (OSError, ValueError) as error:
        raise SystemExit(f"longctx_trainer.export: {error}") from None
    print(f"step {step} -> {args.output} ({len(files)} safetensors file{'s' if len(files) > 1 else ''}, {args.dtype})")


if __name__ == "__main__":
    main()
