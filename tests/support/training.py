"""Training runs of the JAX trainer's tests on the host's CPU devices (tests/unit/conftest.py makes eight)."""

from __future__ import annotations

import jax

from longctx_trainer.contract.config import TrainerConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import train


def step_losses(config: TrainerConfig) -> list[float]:
    """The loss of each step of `config`, trained on the first config.parallelism.devices devices."""
    events = []
    train(
        config,
        make_mesh(config.parallelism, jax.devices()[: config.parallelism.devices]),
        emit=events.append,
        metrics=TrainMetrics("test", 0),
        peak_flops_per_device=1e12,
    )
    return [e["loss"] for e in events if e["event"] == "step"]
