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
import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from .. import podenv
from ..config import TrainerConfig, load_config
from ..metrics import TrainMetrics
from .layout import Groups, Layout
from .train import Checkpoints, measured_peak_flops, train

BACKEND = "gloo"


def _print_json(event: dict) -> None:
    print(json.dumps(event), flush=True)


def check_agrees(config: TrainerConfig, layout: Layout) -> None:
    """The config file and the environment come from one render; refuse what this trainer cannot do."""
    p = config.parallelism
    if (p.data, p.context, config.sequence_length) != (layout.data, layout.context, layout.sequence_length):
        raise ValueError(
            f"the config's layout (data {p.data}, context {p.context}, sequence {config.sequence_length}) "
            f"is not the environment's ({layout.data}, {layout.context}, {layout.sequence_length})"
        )
    if config.precision != "fp32":
        raise ValueError(f"precision {config.precision}: the PyTorch example computes in fp32 only")
    if config.init_from:
        raise ValueError("initFrom: the PyTorch example starts from random weights only")


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
    dist.init_process_group(BACKEND, init_method="env://", rank=layout.rank, world_size=layout.world_size)
    groups = Groups.create(layout)
    _print_json({"event": "joined", "rank": layout.rank, "processes": layout.world_size, "backend": BACKEND})
    metrics = TrainMetrics(config.metrics.job, layout.rank)
    if config.metrics.port:
        try:
            metrics.serve(config.metrics.port + int(os.environ.get(podenv.LOCAL_PROCESS_ID, "0")))
        except OSError as error:  # e.g. the port is taken
            raise SystemExit(f"longctx_trainer.pytorch: {error}") from None
    metrics.describe(config, BACKEND)
    checkpoints = Checkpoints(config.checkpoint, layout.rank) if config.checkpoint.path else None
    emit = _print_json if layout.rank == 0 else (lambda event: None)
    try:
        train(
            config,
            layout,
            groups,
            emit=emit,
            metrics=metrics,
            checkpoints=checkpoints,
            peak_flops_per_process=measured_peak_flops(),
        )
    finally:
        dist.destroy_process_group()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
