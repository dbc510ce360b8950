"""`python -m longctx_trainer.pytorch`: one rank of the PyTorch example trainer.

Reads the rendered trainer config (`--config`, default LONGCTX_CONFIG) for the model, data,
optimizer, steps, checkpoints and metrics, and the layout and identity from the environment
(layout.py). Joins the gang with torch.distributed's env:// rendezvous (MASTER_ADDR,
MASTER_PORT) over gloo: this example trains on CPU. Progress goes to stdout as JSON lines, the
"joined" line from every rank and the rest from rank 0; every rank exports the JAX trainer's
metrics on metrics.port + LONGCTX_LOCAL_PROCESS_ID.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch.distributed as dist
from pydantic.alias_generators import to_camel

from ..contract import podenv
from ..contract.config import TrainerConfig, load_config
from ..contract.events import emitter, print_event
from ..contract.metrics import TrainMetrics
from ..contract.termination import Preempted, SigtermNotice, exit_preempted
from .layout import Groups, Layout
from .train import Checkpoints, measured_peak_flops, train

BACKEND = "gloo"


def check_agrees(config: TrainerConfig, layout: Layout) -> None:
    """The config file and the environment come from one render; refuse what this trainer cannot do."""
    p = config.parallelism
    if (p.data, p.context, config.sequence_length) != (layout.data, layout.context, layout.sequence_length):
        raise ValueError(
            f"the config's layout (data {p.data}, context {p.context}, sequence {config.sequence_length}) "
            f"is not the environment's ({layout.data}, {layout.context}, {layout.sequence_length})"
        )
    if problem := unsupported(config):
        raise ValueError(problem)


def unsupported(config: TrainerConfig) -> str | None:
    """The first setting this example does not implement, as one line naming its manifest field;
    None when it runs the job as written. Everything else in the config it honours (a setting it
    would ignore is refused here, never run as something else)."""
    p, rope = config.parallelism, config.model.rope_scaling
    refused = {
        "precision": (config.precision != "fp32", f"{config.precision}: the PyTorch example computes in fp32 only"),
        "initFrom": (config.init_from is not None, "the PyTorch example starts from random weights only"),
        "model.ropeScaling": (
            rope is not None and rope.factor != 1,
            "the PyTorch example applies plain RoPE only",
        ),
        "parallelism.tensor": (p.tensor != 1, f"{p.tensor}: the PyTorch example has no tensor parallelism"),
        "parallelism.attention": (
            p.attention != "ring",
            f"{to_camel(p.attention)}: the PyTorch example implements ring attention only",
        ),
        "offload": (
            config.offload.enabled or config.offload.chunk_tokens is not None,
            "the PyTorch example keeps whole shards on the device: no sequence chunking or host offload",
        ),
        "data.packing": (
            config.data.packing.enabled,
            "the PyTorch example has no document mask or position reset: attention and RoPE span the sequence",
        ),
        "communication.collectivePermute": (
            config.communication != "nccl",
            f"{config.communication}: the PyTorch example passes the ring over gloo",
        ),
    }
    return next((f"{field}: {why}" for field, (refuse, why) in refused.items() if refuse), None)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m longctx_trainer.pytorch", description=__doc__)
    parser.add_argument("--config", type=Path, default=os.environ.get(podenv.CONFIG), help="TrainerConfig YAML")
    args = parser.parse_args(argv)
    try:  # a bad config or env ends with its message, not a traceback
        if args.config is None:
            raise ValueError(f"no --config and no {podenv.CONFIG}")
        config = load_config(args.config)
        layout = Layout.from_environ()
        check_agrees(config, layout)
    except (OSError, ValueError) as error:
        raise SystemExit(f"longctx_trainer.pytorch: {error}") from None
    try:
        metrics = TrainMetrics.serving(config, layout.rank)
    except OSError as error:  # e.g. the port is taken
        raise SystemExit(f"longctx_trainer.pytorch: {error}") from None
    metrics.enter("rendezvous")
    dist.init_process_group(BACKEND, init_method="env://", rank=layout.rank, world_size=layout.world_size)
    groups = Groups.create(layout)
    print_event({"event": "joined", "rank": layout.rank, "processes": layout.world_size, "backend": BACKEND})
    metrics.describe(config, BACKEND)
    checkpoints = Checkpoints(config.checkpoint, layout.rank) if config.checkpoint.path else None
    # SIGTERM (a deleted pod, a drain, Kueue) is a preemption notice when there is a checkpoint
    # to write: every rank saves one step and exits PREEMPTED_EXIT_CODE (termination.py).
    notice = SigtermNotice() if checkpoints is not None else None
    emit = emitter(layout.rank)
    try:
        train(
            config,
            layout,
            groups,
            emit=emit,
            metrics=metrics,
            checkpoints=checkpoints,
            peak_flops_per_process=measured_peak_flops(),
            notice=notice,
        )
    except Preempted as stop:  # every rank saved; `finally` leaves the process group first
        exit_preempted(stop.step)
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
