"""Save on preemption (trainer/preemption.py, termination.py) with real trainer processes joined over
gloo: a SIGTERM that reaches one rank alone makes every rank save the same step (JAX's preemption
sync point on the coordination service; in the PyTorch example, the notice carried by the step's
all-reduce), between interval checkpoints, and exit PREEMPTED_EXIT_CODE; a restart resumes at the
step after it."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from longctx_operator.render.env import cpu_xla_flags
from longctx_trainer.contract import podenv
from longctx_trainer.contract.termination import PREEMPTED_EXIT_CODE, PREEMPTED_MESSAGE
from support.multiprocess import TWO_BY_TWO, progress_events
from support.ports import free_port

pytestmark = pytest.mark.integration

CONFIG = {**TWO_BY_TWO, "steps": 100_000}


def _start_ranks(config: Path, coordinator: str, run: str) -> list[subprocess.Popen]:
    """Two processes of two CPU devices each, joined at `coordinator`; output in files."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(XLA_FLAGS=cpu_xla_flags(2), JAX_PLATFORMS="cpu")  # as a CPU job's pods
    return [
        subprocess.Popen(
            [sys.executable, "-m", "longctx_trainer", "--config", str(config)],
            env={**env, "JAX_COORDINATOR_ADDRESS": coordinator, "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": str(rank)},
            stdout=(config.parent / f"{run}{rank}.out").open("w"),
            stderr=(config.parent / f"{run}{rank}.err").open("w"),
        )
        for rank in range(2)
    ]


def _checkpoints(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit())


def _check_resumes_after(step: int, config: Path, settings: dict, ckpt: Path, start) -> None:
    """A second run (`start(config)`, its files named second<rank>) of `settings`, checkpointing
    to `ckpt` only at its end, resumes from `step` and trains steps step + 1 and step + 2."""
    config.write_text(yaml.safe_dump({**settings, "checkpoint": {"path": str(ckpt), "interval_steps": 10_000}}))
    workers = start(config)
    try:
        assert [w.wait(timeout=300) for w in workers] == [0, 0], (config.parent / "second0.err").read_text()[-3000:]
    finally:
        for worker in workers:
            worker.kill()
    events = progress_events(config.parent / "second0.out")
    assert {"event": "resume", "step": step} in events
    assert [e["step"] for e in events if e["event"] == "step"] == [step + 1, step + 2]


def _preempted_after_three_steps(workers: list[subprocess.Popen], out: Path) -> tuple[list[dict], int]:
    """After rank 0's third step, SIGTERM to rank 1 alone (as `kubectl delete pod` of its pod):
    both ranks exit PREEMPTED_EXIT_CODE, each saying so in one line. Rank 0's progress events and
    the step they saved."""
    try:
        deadline = time.monotonic() + 600  # a loaded machine compiles slowly
        while sum(e["event"] == "step" for e in progress_events(out / "first0.out")) < 3:
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                pytest.fail(f"no third step: {(out / 'first0.err').read_text()[-3000:]}")
            time.sleep(0.2)
        workers[1].send_signal(signal.SIGTERM)
        codes = [w.wait(timeout=120) for w in workers]
    finally:
        for worker in workers:
            worker.kill()
    assert codes == [PREEMPTED_EXIT_CODE, PREEMPTED_EXIT_CODE], (out / "first0.err").read_text()[-3000:]
    events = progress_events(out / "first0.out")
    (step,) = [e["step"] for e in events if e["event"] == "preempted"]
    for rank in range(2):
        assert (
            f"{PREEMPTED_MESSAGE.format(step=step)}; exiting {PREEMPTED_EXIT_CODE}"
            in (out / f"first{rank}.err").read_text()
        )
    return events, step


def test_one_signalled_rank_makes_every_rank_save_the_same_step_and_a_restart_resumes_after_it(tmp_path):
    ckpt = tmp_path / "ckpt"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "checkpoint": {"path": str(ckpt), "interval_steps": 10_000}}))
    events, step = _preempted_after_three_steps(_start_ranks(config, f"127.0.0.1:{free_port()}", "first"), tmp_path)
    assert step >= 3 and events[-2:] == [{**events[-2], "event": "checkpoint", "step": step}, events[-1]]
    assert _checkpoints(ckpt) == [step]  # one save, by both processes together, between intervals

    second = {**CONFIG, "steps": step + 2}
    _check_resumes_after(step, config, second, ckpt, lambda c: _start_ranks(c, f"127.0.0.1:{free_port()}", "second"))


def _start_torch_ranks(config: Path, run: str) -> list[subprocess.Popen]:
    """The PyTorch example trainer as two processes (data 1 x context 2) over gloo, env:// rendezvous."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "LONGCTX_"))}
    env.update(
        {
            podenv.DATA_PARALLEL: "1",
            podenv.CONTEXT_PARALLEL: "2",
            podenv.TENSOR_PARALLEL: "1",
            podenv.SEQUENCE_LENGTH: str(CONFIG["sequence_length"]),
            podenv.WORLD_SIZE: "2",
            podenv.MASTER_ADDR: "127.0.0.1",
            podenv.MASTER_PORT: str(free_port()),
        }
    )
    return [
        subprocess.Popen(
            [sys.executable, "-m", "longctx_trainer.pytorch", "--config", str(config)],
            env={**env, podenv.RANK: str(rank)},
            stdout=(config.parent / f"{run}{rank}.out").open("w"),
            stderr=(config.parent / f"{run}{rank}.err").open("w"),
        )
        for rank in range(2)
    ]


def test_the_pytorch_example_agrees_over_torch_distributed_and_resumes_after_the_saved_step(tmp_path):
    pytest.importorskip("torch")
    ckpt = tmp_path / "ckpt"
    torch_config = {**CONFIG, "parallelism": {"data": 1, "context": 2, "tensor": 1}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({**torch_config, "checkpoint": {"path": str(ckpt), "interval_steps": 10_000}}))
    events, step = _preempted_after_three_steps(_start_torch_ranks(config, "first"), tmp_path)
    assert {"event": "checkpoint", "step": step} == {k: v for k, v in events[-2].items() if k != "seconds"}

    _check_resumes_after(
        step, config, {**torch_config, "steps": step + 2}, ckpt, lambda c: _start_torch_ranks(c, "second")
    )
