"""`python -m longctx_trainer --config FILE`: one worker process of a training job.

Process identity comes from the JAX_* environment (see distributed.py). Progress goes to stdout
as JSON lines: every process prints its "joined" line, the rest comes from process 0 only. The
metrics exporter listens on config.metrics.port plus LONGCTX_LOCAL_PROCESS_ID (default 0), so
several processes on one host or pod do not collide.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import jax
import numpy as np
from jax.experimental import multihost_utils

from . import compile_cache
from .checkpoint import Checkpoints
from .contract import podenv
from .contract.config import TrainerConfig, load_config
from .contract.events import emitter, print_event
from .contract.metrics import TrainMetrics
from .contract.termination import Preempted, exit_preempted
from .contract.topology import Topology, placement_labels
from .data import Batches
from .distributed import ProcessEnv, initialize
from .faults import exit_at_step, freeze_in_rendezvous
from .ops.block import attention_kernel
from .peak import fp8_peak_flops, peak_flops
from .preemption import Preemption
from .shared_storage import shared_by_all_processes
from .topology import exchange, ordered_mesh
from .train import StepFunctions, train
from .weights import WeightsError


def joined_event(process_env: ProcessEnv, rank: int) -> dict:
    """Every process's first line: who it is and where it met the others (a pod's own log shows
    that it took part, not only rank 0's)."""
    return {
        "event": "joined",
        "rank": rank,
        "processes": jax.process_count(),
        "coordinator": process_env.coordinator_address,
        "local_devices": jax.local_device_count(),
        "backend": jax.default_backend(),
    }


def dump_gradients(fns: StepFunctions, config: TrainerConfig, path: Path) -> None:
    """Write the loss and gradients of step 0's batch at the initial parameters (a .npz).

    A verification aid: the same job on different process/device layouts must write the same
    numbers. Every process takes part in gathering; process 0 writes.
    """
    state = fns.init(jax.random.key(config.seed))
    loss, grads = fns.loss_and_grads(state["params"], *Batches(config, fns.mesh).for_step(0))
    flat = {
        jax.tree_util.keystr(k): multihost_utils.process_allgather(g, tiled=True)
        for k, g in jax.tree.flatten_with_path(grads)[0]
    }
    loss = np.asarray(loss)  # replicated: readable on every process
    if jax.process_index() == 0:
        np.savez(path, loss=loss, **flat)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m longctx_trainer", description=__doc__)
    parser.add_argument("--config", required=True, type=Path, help="TrainerConfig YAML file")
    parser.add_argument(
        "--dump-gradients", type=Path, metavar="NPZ", help="also write step 0's loss and gradients to this file"
    )
    args = parser.parse_args(argv)

    try:  # a bad config, env or layout ends with its message, not a traceback
        config = load_config(args.config)
        process_env = ProcessEnv.from_environ()
        fault = exit_at_step(process_env.process_id)  # a test's fault, off unless asked
    except (OSError, ValueError) as error:
        raise SystemExit(f"longctx_trainer: {error}") from None
    try:
        metrics = TrainMetrics.serving(config, process_env.process_id)
    except OSError as error:  # e.g. the port is taken
        raise SystemExit(f"longctx_trainer: {error}") from None
    metrics.observe_in_place_restarts(os.environ.get(podenv.RESTART_EPOCH))
    metrics.enter("rendezvous")
    freeze_in_rendezvous(metrics, process_env.process_id)  # a test's fault, off unless asked
    node_labels, no_placement = placement_labels(os.environ)  # before the rendezvous: ranks wait at once
    try:
        topology, placement = Topology.from_environ(os.environ, node_labels)
        initialize(process_env, config.communication)
        mesh, ring = ordered_mesh(config.parallelism, topology, exchange(placement))
    except (OSError, ValueError) as error:
        raise SystemExit(f"longctx_trainer: {error}") from None
    rank = jax.process_index()
    if config.checkpoint.path and not shared_by_all_processes(
        config.checkpoint.path, rank, process_env.num_processes
    ):  # a save would wait forever for the other processes' parts (shared_storage.py)
        print(
            f"longctx_trainer: warning: checkpoint.path {config.checkpoint.path!r} is not one directory "
            f"shared by the job's {process_env.num_processes} processes (each sees only its own files: "
            "mount a ReadWriteMany claim there, or use gs:// or s3://); training without checkpoints",
            file=sys.stderr,
            flush=True,
        )
        config = config.model_copy(update={"checkpoint": config.checkpoint.model_copy(update={"path": None})})
    if (cache := compile_cache.cache_dir(config.checkpoint.path)) is not None:
        compile_cache.enable(cache)  # a restart loads its compiled step from there
    # Ctrl-C (SIGINT) ends the process where it stands, by the kernel: unwinding (Python's
    # KeyboardInterrupt) would run JAX's exit hooks, which wait at a barrier for the other ranks,
    # which wait for this one, and the whole gang would hang. SIGTERM (a deleted pod, a Kueue
    # preemption, a drain) is a preemption notice when there is a checkpoint to write: every rank
    # saves the step they agree on and exits PREEMPTED_EXIT_CODE (preemption.py; JAX's preemption
    # service, started by jax.distributed.initialize, catches it). Without checkpoints it ends the
    # process at once, like SIGINT. (In a pod the launcher is PID 1 and forwards both.)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    preemption = Preemption(process_env.num_processes) if config.checkpoint.path else None
    if preemption is None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    print_event(joined_event(process_env, rank))
    if no_placement:  # the ring is ordered by the pod's labels alone (a level may read unknown)
        print_event({"event": "placement", "source": "pod labels", "why": no_placement})

    metrics.enter("compiling")  # rendezvous done: tracing, restoring and compiling the step
    metrics.describe(config, jax.default_backend())

    fns = StepFunctions(config, mesh)
    if args.dump_gradients:
        dump_gradients(fns, config, args.dump_gradients)
    checkpoints = Checkpoints(config.checkpoint) if config.checkpoint.path else None
    emit = emitter(rank)
    emit(ring.event())
    metrics.observe_ring(ring.hops)
    kernel, why = attention_kernel(fns.model.options.compute_dtype, config.model.head_dim)
    emit({"event": "attention_kernel", "kernel": kernel, "why": why})
    fp8_peak = fp8_peak_flops(jax.local_devices()[0]) if config.precision == "fp8" else None
    if config.precision == "fp8":  # say so where FP8 is only FP8's rounding, not its speed
        emit({"event": "fp8", "emulated": fp8_peak is None, "device": jax.local_devices()[0].device_kind})
    try:
        train(
            config,
            mesh,
            emit=emit,
            metrics=metrics,
            checkpoints=checkpoints,
            peak_flops_per_device=peak_flops(jax.local_devices()[0]),
            fp8_peak_flops_per_device=fp8_peak,
            fns=fns,
            preemption=preemption,
            after_step=fault,
            processes_per_node=process_env.processes_per_node,
        )
    except Preempted as stop:  # the checkpoint is written; `finally` closes the manager first
        exit_preempted(stop.step)
    except WeightsError as error:
        raise SystemExit(f"longctx_trainer: init_from: {error}") from None
    finally:
        if checkpoints is not None:
            checkpoints.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
