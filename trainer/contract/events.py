"""The progress log both trainers write: events handed to `emit`, which rank 0 prints as one JSON
line each. `longctx run` follows it (operator/localrun.py) and the benchmarks read it, so both
trainers build their common events here, and the log of one cannot drift from the other's:
  {"event": "step", "step", "loss", "tokens_per_second", "mfu", "step_seconds"}
  {"event": "checkpoint", "step", "seconds"}
  {"event": "resume", "step"}  (restored from the checkpoint of that step; the next step is step + 1)
  {"event": "preempted", "step"}  (a SIGTERM reached a rank: the checkpoint of this step is saved;
  the trainer then exits with termination.PREEMPTED_EXIT_CODE)
  {"event": "done", "step"}
No JAX, torch or Kubernetes import."""

from __future__ import annotations

import json
from collections.abc import Callable

STEP, CHECKPOINT, RESUME, PREEMPTED, DONE = "step", "checkpoint", "resume", "preempted", "done"


def print_event(event: dict) -> None:
    """One event as one JSON line on stdout, flushed: `longctx run` and `kubectl logs` follow it live."""
    print(json.dumps(event), flush=True)


def emitter(rank: int) -> Callable[[dict], None]:
    """The `emit` of the training loop: rank 0 prints its events, the other ranks' are dropped."""
    return print_event if rank == 0 else (lambda event: None)


def logs_step(step: int, log_every: int, steps: int) -> bool:
    """Whether finished step `step` (1-based) of `steps` gets a step event: every `log_every`th, and the last."""
    return step % log_every == 0 or step == steps


def step_event(step: int, loss: float, tokens_per_second: float, mfu: float | None, seconds: float) -> dict:
    """`mfu`: under metrics.MFU_CONVENTION and MFU_PEAK (None where the device's peak is unknown)."""
    return {
        "event": STEP,
        "step": step,
        "loss": loss,
        "tokens_per_second": tokens_per_second,
        "mfu": mfu,
        "step_seconds": seconds,
    }


def checkpoint_event(step: int, seconds: float) -> dict:
    return {"event": CHECKPOINT, "step": step, "seconds": seconds}


def resume_event(step: int) -> dict:
    return {"event": RESUME, "step": step}


def preempted_event(step: int) -> dict:
    return {"event": PREEMPTED, "step": step}


def done_event(step: int) -> dict:
    return {"event": DONE, "step": step}
