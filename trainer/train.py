"""The training loop: AdamW with warm-up and clipping, jitted sharded step, checkpoints, progress.

Progress events are dicts handed to `emit` (the CLI prints them as JSON lines on process 0): the
events both trainers write (step, checkpoint, resume, preempted, done: contract/events.py), and
  {"event": "init", "from", "notes", "seconds"}  (weights from a Hugging Face checkpoint)
  {"event": "compiling"}  (the training step is being compiled: the first step line waits for it)
  {"event": "compiled", "seconds", "from_cache"}  (compiled, or loaded from the persistent
      compilation cache beside the checkpoints: compile_cache.py)
The CLI adds {"event": "ring_order", ...} (trainer/topology.py), {"event": "attention_kernel", ...}
and, for fp8, {"event": "fp8", "emulated", "device"}
(emulated: the device has no FP8 peak, e.g. a CPU: FP8's rounding without its speed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import optax
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from . import model
from .adaptive_cp import PAD_SEGMENT
from .checkpoint import Checkpoints
from .compile_cache import counting_hits
from .contract.config import OptimizerConfig, TrainerConfig
from .contract.events import checkpoint_event, done_event, logs_step, preempted_event, resume_event, step_event
from .contract.flops import causal_pairs_within_documents, flops_per_token
from .contract.health import RecentTimes
from .contract.metrics import MFU_CONVENTION, MFU_PEAK, TrainMetrics
from .contract.schedule import learning_rate_factor
from .contract.termination import Preempted
from .data import Batches
from .mesh import TOKENS
from .preemption import Preemption
from .probe import ComputeProbe, LinkProbe
from .weights import load_params

Emit = Callable[[dict], None]


def learning_rate_schedule(opt: OptimizerConfig, steps: int) -> optax.Schedule:
    """The shared schedule (schedule.py) on optax's traced step count."""
    factor = learning_rate_factor(opt, steps, jnp)
    return lambda count: opt.learning_rate * factor(count)


def _decay_mask(params: dict) -> dict:
    """Weight decay on weight matrices only, not on the norm scales."""
    return jax.tree.map_with_path(lambda path, _: not path[-1].key.endswith("norm"), params)


def make_optimizer(opt: OptimizerConfig, steps: int) -> optax.GradientTransformation:
    """Clipped AdamW over the weights (FP8 scaling state is never the optimizer's: see `_step`)."""
    return optax.chain(
        optax.clip_by_global_norm(opt.grad_clip),
        optax.adamw(
            learning_rate_schedule(opt, steps),
            b1=opt.beta1,
            b2=opt.beta2,
            weight_decay=opt.weight_decay,
            mask=_decay_mask,
        ),
    )


@dataclass
class StepFunctions:
    """The jitted pieces of training for one (config, mesh); state = {params, opt_state, step}."""

    config: TrainerConfig
    mesh: Mesh

    def __post_init__(self):
        mesh = self.mesh
        self.model = model.Model.from_config(self.config, mesh)
        self.optimizer = make_optimizer(self.config.optimizer, self.config.steps)
        params = self.model.param_shardings()
        weights = self.model.param_shardings(weights_only=True)  # the optimizer's
        replicated = NamedSharding(mesh, P())
        abstract_weights = jax.eval_shape(partial(model.init_params, self.config.model), jax.random.key(0))
        opt_state = optax.tree_map_params(
            self.optimizer,
            lambda _, sharding: sharding,
            jax.eval_shape(self.optimizer.init, abstract_weights),
            weights,
            transform_non_params=lambda _: replicated,
        )
        self.state_shardings = {"params": params, "opt_state": opt_state, "step": replicated}
        tokens = NamedSharding(mesh, TOKENS)
        self._compiled = {}
        self.init = jax.jit(self._init, out_shardings=self.state_shardings)
        self.init_with = jax.jit(self._init_with, out_shardings=self.state_shardings, donate_argnums=0)
        self.step = jax.jit(
            self._step,
            in_shardings=(self.state_shardings, tokens, tokens, tokens),
            out_shardings=(self.state_shardings, replicated),
            donate_argnums=0,
            static_argnums=4,  # ring, passed by position (jit takes no keywords with in_shardings)
        )
        self.loss_and_grads = jax.jit(
            jax.value_and_grad(self.model.loss),
            in_shardings=(params, tokens, tokens, tokens),
            out_shardings=(replicated, params),
        )

    def abstract_state(self) -> dict:
        """Shapes, dtypes and shardings of the train state, without computing it."""
        shapes = jax.eval_shape(self._init, jax.random.key(0))
        return jax.tree.map(
            lambda s, sharding: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sharding), shapes, self.state_shardings
        )

    def compiled_step(self, state: dict, inputs: jax.Array, targets: jax.Array, documents=None, ring=None):
        """The step compiled ahead of time (so no step's timing includes compilation), once per
        adaptive variant (`ring`: its ring part; None without adaptive context parallelism)."""
        if ring not in self._compiled:
            self._compiled[ring] = self.step.lower(state, inputs, targets, documents, ring).compile()
        return self._compiled[ring]

    def _initial_params(self, key: jax.Array) -> dict:
        return self.model.with_fp8_state(model.init_params(self.config.model, key))

    def _init(self, key: jax.Array) -> dict:
        return self._init_with(self._initial_params(key))

    def _init_with(self, params: dict) -> dict:
        weights, _ = model.split_fp8_state(params)
        params = self.model.with_fp8_state(params)
        return {"params": params, "opt_state": self.optimizer.init(weights), "step": jnp.zeros((), jnp.int32)}

    def _step(self, state: dict, inputs: jax.Array, targets: jax.Array, documents=None, ring=None) -> tuple[dict, dict]:
        """One AdamW step of the weights; returns the new state and {"loss"} (with a document mask,
        also "attention_pairs": the causal query-key pairs within documents, see flops.py). With
        FP8, the "gradient" of the scaling state is its updated value (fp8_einsum's backward
        returns it there) and replaces it as it is. `ring`: the adaptive variant's ring part."""
        loss, grads = jax.value_and_grad(self.model.with_adaptive_ring(ring).loss)(
            state["params"], inputs, targets, documents
        )
        weights, _ = model.split_fp8_state(state["params"])
        weight_grads, scaling = model.split_fp8_state(grads)
        updates, opt_state = self.optimizer.update(weight_grads, state["opt_state"], weights)
        params = optax.apply_updates(weights, updates)
        if scaling is not None:
            params = {**params, model.FP8_STATE: scaling}
        stats = {"loss": loss}
        if documents is not None and self.config.data.packing.document_mask:
            real = documents.segments != PAD_SEGMENT  # adaptive layouts' padding adds no pairs
            stats["attention_pairs"] = causal_pairs_within_documents(jnp.where(real, documents.positions, -0.5))
        return {"params": params, "opt_state": opt_state, "step": state["step"] + 1}, stats


def _restore(
    checkpoints: Checkpoints, step: int, abstract_state: dict, batches: Batches, config: TrainerConfig
) -> dict:
    state, meta = checkpoints.restore(step, abstract_state)
    if meta["data_seed"] != config.data.seed or meta["data_position"] != batches.position(step):
        raise ValueError(
            f"checkpoint {step} was written for other data ({meta}); resume needs the same data seed and batch size"
        )
    return state


def _initial_weights(config: TrainerConfig, fns: StepFunctions, emit: Emit) -> dict:
    begin = time.perf_counter()
    params, notes = load_params(config.init_from, fns.model)
    state = fns.init_with(params)
    emit({"event": "init", "from": config.init_from, "notes": notes, "seconds": time.perf_counter() - begin})
    return state


def train(
    config: TrainerConfig,
    mesh: Mesh,
    *,
    emit: Emit,
    metrics: TrainMetrics,
    checkpoints: Checkpoints | None = None,
    peak_flops_per_device: float,
    fp8_peak_flops_per_device: float | None = None,
    fns: StepFunctions | None = None,
    preemption: Preemption | None = None,
    after_step: Callable[[int], None] | None = None,
    processes_per_node: int = 1,
) -> dict:
    """Train from the latest checkpoint (or from scratch) to `config.steps`; returns the state.

    MFU is reported against the dense bf16 peak (`peak_flops_per_device`; the usual convention,
    under which FP8 shows as a higher MFU) and, when given, against the FP8 peak as well. With
    `preemption` (and checkpoints), a SIGTERM makes every rank save the step they agree on and
    raise `Preempted`. `after_step(step)` is called after each step and its checkpoint (a test's
    fault, trainer/faults.py). `processes_per_node` groups the processes into nodes for the link
    probe (probe.LinkProbe), which runs beside the compute probe."""
    fns = fns or StepFunctions(config, mesh)
    batches = Batches(config, mesh)
    start = checkpoints.latest_step() if checkpoints is not None else None
    if start is None:  # from scratch: the given weights, or random ones
        start = 0
        state = _initial_weights(config, fns, emit) if config.init_from else fns.init(jax.random.key(config.seed))
    else:  # restored straight into the sharded layout, never initialised first
        state = _restore(checkpoints, start, fns.abstract_state(), batches, config)
        emit(resume_event(start))
    metrics.observe_resume(start)

    flops = flops_per_token(config.model, config.sequence_length).by_convention()
    peaks = {MFU_PEAK: peak_flops_per_device * mesh.size}
    if fp8_peak_flops_per_device is not None:
        peaks["fp8"] = fp8_peak_flops_per_device * mesh.size
    emit({"event": "compiling"})
    metrics.enter("compiling")
    batch, ring = batches.for_step(start), batches.ring(start)
    begin = time.perf_counter()
    with counting_hits() as hits:
        fns.compiled_step(state, *batch, ring=ring)
    emit({"event": "compiled", "seconds": time.perf_counter() - begin, "from_cache": hits() > 0})
    every = config.metrics.probe_every_steps
    probe = ComputeProbe(mesh.local_devices) if every else None
    link = LinkProbe(processes_per_node) if every else None
    data_times = RecentTimes()
    metrics.enter("training")
    for step in range(start, config.steps):
        begin = time.perf_counter()  # a new adaptive variant's first step includes its compilation
        state, stats = fns.compiled_step(state, *batch, ring=ring)(state, *batch)
        if step + 1 < config.steps:  # read (and lay out) the next batch while this step runs
            fetching = time.perf_counter()
            batch, ring = batches.for_step(step + 1), batches.ring(step + 1)
            metrics.observe_data(data_times.add(time.perf_counter() - fetching))
        loss = float(stats["loss"])
        seconds = time.perf_counter() - begin
        if "attention_pairs" in stats:  # the attention FLOPs this batch's documents need
            pairs = float(stats["attention_pairs"]) / config.batch_size
            flops = flops_per_token(config.model, config.sequence_length, causal_pairs=pairs).by_convention()
        done = step + 1
        tokens_per_second = config.global_batch_tokens / seconds
        mfu = {(c, name): tokens_per_second * f / peak for c, f in flops.items() for name, peak in peaks.items()}
        metrics.observe_step(done, config.global_batch_tokens, seconds, loss, mfu)
        if probe is not None and done % every == 0:
            jax.block_until_ready(state)  # this step's work is done: only the probe is timed
            metrics.observe_probe(probe.measure())
            if (link_seconds := link.measure()) is not None:  # three nodes or more
                metrics.observe_link(link_seconds)
        if logs_step(done, config.log_every, config.steps):
            emit(step_event(done, loss, tokens_per_second, mfu[(MFU_CONVENTION, MFU_PEAK)], seconds))
        # every rank asks at every step (the agreement needs it); the last step just finishes
        preempted = (
            checkpoints is not None and preemption is not None and preemption.reached(done) and done < config.steps
        )
        if checkpoints is not None and (preempted or checkpoints.due(done, config.steps)):
            meta = {"step": done, "data_position": batches.position(done), "data_seed": config.data.seed}
            seconds = metrics.checkpoint(done, partial(checkpoints.save, done, state, meta))
            emit(checkpoint_event(done, seconds))
        if preempted:
            emit(preempted_event(done))
            raise Preempted(done)
        if after_step is not None:
            after_step(done)
    emit(done_event(config.steps))
    return state
