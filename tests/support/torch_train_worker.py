"""Worker of the PyTorch trainer tests: one rank trains a tiny config for a few steps and returns
its losses (tests/unit/trainer/pytorch/test_train.py)."""

from __future__ import annotations

import torch.distributed as dist

from longctx_trainer.contract.config import DataConfig, OptimizerConfig, ParallelConfig, TrainerConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.pytorch.layout import Groups, Layout
from support.tiny import TINY_MODEL, tiny_trainer_config


def tiny_config(data: int, context: int, steps: int, corpus: str) -> TrainerConfig:
    return tiny_trainer_config(
        model=TINY_MODEL.model_copy(update={"tie_embeddings": True}),
        global_batch_tokens=4 * 64,
        steps=steps,
        parallelism=ParallelConfig(data=data, context=context),
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=2),
        data=DataConfig(kind="text", path=corpus, seed=1),
    )


def train_losses(rank: int, data: int, context: int, steps: int, corpus: str) -> list[float]:
    from longctx_trainer.pytorch.train import train

    config = tiny_config(data, context, steps, corpus)
    layout = Layout(data=data, context=context, rank=rank, sequence_length=config.sequence_length)
    assert dist.get_world_size() == layout.world_size
    return train(config, layout, Groups.create(layout), emit=lambda e: None, metrics=TrainMetrics("test", rank))


def observed_times(rank: int, every: int, steps: int, corpus: str) -> dict[str, list[float]]:
    """The probe and data times one rank exported while training `steps` steps probing every `every`."""
    from longctx_trainer.contract.config import MetricsConfig
    from longctx_trainer.pytorch.train import train

    config = tiny_config(1, 1, steps, corpus).model_copy(update={"metrics": MetricsConfig(probe_every_steps=every)})
    layout = Layout(data=1, context=1, rank=rank, sequence_length=config.sequence_length)
    times: dict[str, list[float]] = {"probe": [], "data": []}

    class Recorded(TrainMetrics):
        def observe_probe(self, seconds: float) -> None:
            times["probe"].append(seconds)
            super().observe_probe(seconds)

        def observe_data(self, seconds: float) -> None:
            times["data"].append(seconds)
            super().observe_data(seconds)

    train(config, layout, Groups.create(layout), emit=lambda e: None, metrics=Recorded("test", rank))
    return times
