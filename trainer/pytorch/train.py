"""The training loop of the PyTorch example: AdamW with the shared schedule (schedule.py), gradients
summed over the context ring and the data-parallel group, progress events and metrics under the
same names as the JAX trainer (longctx_trainer.contract.metrics), checkpoints every interval.

Events handed to `emit` (rank 0 prints them as JSON lines, which `longctx run` follows): the JAX
trainer's step, checkpoint, resume, preempted and done events (longctx_trainer.contract.events).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn import functional as F

from ..contract import podenv
from ..contract.config import CheckpointConfig, OptimizerConfig, TrainerConfig
from ..contract.events import checkpoint_event, done_event, logs_step, preempted_event, resume_event, step_event
from ..contract.flops import flops_per_token
from ..contract.health import RecentTimes
from ..contract.load_balance import permutation
from ..contract.metrics import MFU_CONVENTION, MFU_PEAK, TrainMetrics
from ..contract.schedule import learning_rate_factor
from ..contract.sources import TokenSource, make_source
from ..contract.termination import Preempted, SigtermNotice
from .layout import Groups, Layout
from .model import Llama
from .probe import ComputeProbe
from .ring import Ring

Emit = Callable[[dict], None]


def make_optimizer(model: Llama, opt: OptimizerConfig, steps: int):
    """AdamW, weight decay on the weight matrices only (not the norm scales), and its schedule."""
    decay = [p for n, p in model.named_parameters() if "norm" not in n]
    keep = [p for n, p in model.named_parameters() if "norm" in n]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": opt.weight_decay}, {"params": keep, "weight_decay": 0.0}],
        lr=opt.learning_rate,
        betas=(opt.beta1, opt.beta2),
    )
    factor = learning_rate_factor(opt, steps)
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: float(factor(step)))


def sequence_positions(config: TrainerConfig, layout: Layout) -> torch.Tensor:
    """True token positions of every context rank's shard [C, T/C], in the job's load-balance
    layout (the JAX trainer's permutation)."""
    perm = permutation(config.sequence_length, layout.context, config.parallelism.load_balance)
    return torch.from_numpy(perm).reshape(layout.context, -1)


def local_batch(source: TokenSource, step: int, config: TrainerConfig, layout: Layout, positions_T: torch.Tensor):
    """This rank's rows (its data-parallel share) and tokens (those at `positions_T`, its context
    shard) of step's global batch: inputs and targets [rows, tokens]."""
    rows = config.batch_size // layout.data
    first = step * config.batch_size + layout.data_index * rows
    windows = torch.from_numpy(np.stack([source.sample(first + r) for r in range(rows)]).astype(np.int64))
    return windows[:, :-1][:, positions_T], windows[:, 1:][:, positions_T]


def _all_reduce_gradients(model: Llama, groups: Groups) -> None:
    """Sum every gradient over the context ring (each rank saw a piece of each sequence), then
    over the data-parallel group (each saw other sequences): one flat buffer, two reductions."""
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=groups.context)
    dist.all_reduce(flat, group=groups.data)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


def measured_peak_flops(size: int = 512, repeats: int = 5) -> float:
    """LONGCTX_PEAK_FLOPS if the job sets it, else this CPU's fp32 matmul rate."""
    if os.environ.get(podenv.PEAK_FLOPS):
        return float(os.environ[podenv.PEAK_FLOPS])
    a = torch.randn(size, size)
    a @ a
    begin = time.perf_counter()
    for _ in range(repeats):
        a @ a
    return 2 * size**3 * repeats / (time.perf_counter() - begin)


class Checkpoints:
    """torch.save files `step-NNNNNNNN.pt` (model, optimizer, schedule) written by rank 0 into a
    path every rank reads (shared storage in a cluster; the run directory locally)."""

    def __init__(self, config: CheckpointConfig, rank: int):
        self.config, self.rank = config, rank
        self.path = Path(config.path)

    def latest(self) -> Path | None:
        found = sorted(self.path.glob("step-*.pt"))
        return found[-1] if found else None

    def due(self, step: int, steps: int) -> bool:
        return step % self.config.interval_steps == 0 or step == steps

    def save(self, step: int, state: dict) -> None:
        if self.rank == 0:
            self.path.mkdir(parents=True, exist_ok=True)
            partial = self.path / f"step-{step:08d}.pt.partial"
            torch.save(state, partial)
            partial.rename(self.path / f"step-{step:08d}.pt")  # never a half-written checkpoint
            for old in sorted(self.path.glob("step-*.pt"))[: -self.config.keep]:
                old.unlink()
        dist.barrier()


def train(
    config: TrainerConfig,
    layout: Layout,
    groups: Groups,
    *,
    emit: Emit,
    metrics: TrainMetrics,
    checkpoints: Checkpoints | None = None,
    notice: SigtermNotice | None = None,
    peak_flops_per_process: float | None = None,
) -> list[float]:
    """Train from the latest checkpoint (or from scratch) to `config.steps`; returns the losses.
    With `notice` (and checkpoints), a SIGTERM to any rank makes every rank save the same step and
    raise `Preempted`."""
    torch.manual_seed(config.seed)  # every rank builds the same initial weights
    model = Llama(config.model)
    optimizer, schedule = make_optimizer(model, config.optimizer, config.steps)
    start = 0
    latest = checkpoints.latest() if checkpoints is not None else None
    if latest is not None:
        state = torch.load(latest, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        schedule.load_state_dict(state["schedule"])
        start = state["step"]
        emit(resume_event(start))
    metrics.observe_resume(start)
    source = make_source(config.data, config.model.vocab, config.sequence_length)
    ring = Ring(groups.context, sequence_positions(config, layout))
    global_tokens = config.global_batch_tokens
    flops = flops_per_token(config.model, config.sequence_length).by_convention()
    peak = peak_flops_per_process * layout.world_size if peak_flops_per_process else None
    every = config.metrics.probe_every_steps
    probe = ComputeProbe(torch.device("cpu")) if every else None  # the example trains on CPU
    losses = []

    def save(step: int) -> None:
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "step": step,
        }
        checkpoints.save(step, state)

    data_times = RecentTimes()
    metrics.enter("training")  # eager: no compiling phase
    for step in range(start, config.steps):
        begin = time.perf_counter()
        inputs, targets = local_batch(source, step, config, layout, ring.positions_CxT[ring.index])
        metrics.observe_data(data_times.add(time.perf_counter() - begin))  # eager: read before the step
        logits = model(inputs, ring)
        loss_sum = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum")
        (loss_sum / global_tokens).backward()  # this rank's share of the global mean
        _all_reduce_gradients(model, groups)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.optimizer.grad_clip)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=False)
        # The loss's all-reduce also carries the SIGTERM notice: every rank learns in the same step
        # that one got it (ranks are in lockstep here), so all save that step.
        noticed = float(notice is not None and notice.received)
        total = torch.stack(
            [loss_sum.detach().reshape(()), torch.tensor(noticed, dtype=loss_sum.dtype, device=loss_sum.device)]
        )
        dist.all_reduce(total)
        loss = total[0].item() / global_tokens
        preempted = checkpoints is not None and total[1].item() > 0 and step + 1 < config.steps
        seconds = time.perf_counter() - begin
        done = step + 1
        losses.append(loss)
        tokens_per_second = global_tokens / seconds
        mfu = {(c, MFU_PEAK): tokens_per_second * f / peak for c, f in flops.items()} if peak else {}
        metrics.observe_step(done, global_tokens, seconds, loss, mfu)
        if probe is not None and done % every == 0:
            metrics.observe_probe(probe.measure())  # eager: this step's work is done
        if logs_step(done, config.log_every, config.steps):
            emit(step_event(done, loss, tokens_per_second, mfu.get((MFU_CONVENTION, MFU_PEAK)), seconds))
        if checkpoints is not None and (preempted or checkpoints.due(done, config.steps)):
            seconds = metrics.checkpoint(done, partial(save, done))
            emit(checkpoint_event(done, seconds))
        if preempted:
            emit(preempted_event(done))
            raise Preempted(done)
    emit(done_event(config.steps))
    return losses
