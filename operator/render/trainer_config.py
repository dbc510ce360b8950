"""Resolve a LongContextJob spec and its layout into the trainer's config (the contract)."""

from __future__ import annotations

from longctx_trainer.contract.config import (
    CheckpointConfig,
    DataConfig,
    Fp8Config,
    MetricsConfig,
    OffloadConfig,
    OptimizerConfig,
    PackingConfig,
    ParallelConfig,
    TrainerConfig,
)

from ..api.spec import LongContextJobSpec
from ..layout import ResolvedLayout
from ..model import model_config


def trainer_config(name: str, spec: LongContextJobSpec, layout: ResolvedLayout) -> TrainerConfig:
    checkpoint_path = spec.checkpoint.path
    return TrainerConfig(
        job_name=name,
        model=model_config(spec.model),
        sequence_length=spec.sequence_length,
        global_batch_tokens=spec.batch_tokens,
        steps=spec.steps,
        precision=spec.precision,
        fp8=Fp8Config(amax_history=spec.fp8.amax_history, lm_head=spec.fp8.lm_head),
        parallelism=ParallelConfig(
            data=layout.data,
            context=layout.context,
            tensor=layout.tensor,
            attention=layout.attention,
            ulysses=layout.ulysses,
            load_balance=layout.load_balance,
            adaptive=spec.parallelism.adaptive,
        ),
        offload=OffloadConfig(enabled=layout.offload, chunk_tokens=layout.chunk_tokens),
        remat_policy=layout.remat_policy,
        communication=spec.communication.collective_permute,
        optimizer=OptimizerConfig(
            learning_rate=spec.optimizer.learning_rate,
            warmup_steps=spec.optimizer.warmup_steps,
            weight_decay=spec.optimizer.weight_decay,
            grad_clip=spec.optimizer.grad_clip,
            schedule=spec.optimizer.schedule,
        ),
        data=DataConfig(
            kind=spec.data.kind,
            path=spec.data.path,
            packing=PackingConfig(
                document_mask=spec.data.packing.document_mask,
                reset_positions=spec.data.packing.reset_positions,
                separator=spec.data.packing.separator,
            ),
        ),
        checkpoint=CheckpointConfig(path=checkpoint_path, interval_steps=spec.checkpoint.interval_steps),
        metrics=MetricsConfig(port=spec.metrics.port, job=name),
        init_from=spec.init_from.path if spec.init_from else None,
    )
