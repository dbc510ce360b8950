"""Training runs of the JAX trainer's tests on the host's CPU devices (tests/unit/conftest.py makes eight)."""

from __future__ import annotations

from collections.abc import Callable

import jax
from jax.sharding import Mesh

from longctx_trainer.checkpoint import Checkpoints
from longctx_trainer.contract.config import TrainerConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import train


def run(config: TrainerConfig, emit: Callable[[dict], None] = lambda event: None, mesh: Mesh | None = None, **options):
    """`train` of `config` as the tests run it: on the first config.parallelism.devices devices
    (or `mesh`), with a test's metrics, a 1e12 FLOP/s peak, and checkpoints where
    config.checkpoint.path is set (closed afterwards); `options` (fns, preemption) go to `train`."""
    if mesh is None:
        mesh = make_mesh(config.parallelism, jax.devices()[: config.parallelism.devices])
    checkpoints = Checkpoints(config.checkpoint) if config.checkpoint.path else None
    try:
        return train(
            config,
            mesh,
            emit=emit,
            metrics=TrainMetrics("test", 0),
            checkpoints=checkpoints,
            peak_flops_per_device=1e12,
            **options,
        )
    finally:
        if checkpoints is not None:
            checkpoints.close()


def step_losses(config: TrainerConfig) -> list[float]:
    """The loss of each step of `config`, trained on the first config.parallelism.devices devices."""
    events = []
    run(config, events.append)
    return [e["loss"] for e in events if e["event"] == "step"]
