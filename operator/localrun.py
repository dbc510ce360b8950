"""`longctx run FILE`: run a job's workers as local processes with the env the operator renders.

Each pod of the rendered Indexed Job becomes one local `python -m longctx_trainer.launch` process
tree with that pod's container env. Only what cannot exist off-cluster is replaced: the
coordinator's DNS name becomes 127.0.0.1 with a free port, the completion index (a pod label) is
given directly, and each process gets a distinct metrics port. Rank 0's JSON progress lines become
a live progress line; every worker's output goes to a log file. Workers run in the run directory,
so a relative checkpoint path (an output) lands there; relative inputs (data, initFrom) are read
from the manifest's own folder, like any file a manifest names. Ctrl-C or a failed worker stops
them all.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from longctx_trainer import podenv
from longctx_trainer.launch import first_failure

from . import names
from .api.spec import LongContextJob
from .render import render_workload
from .resolve import resolve_layout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PROGRESS_FILE = "worker-0.progress.jsonl"
"""Rank 0's full output in the run directory: its JSON progress events at full precision (the
live line rounds them) among the libraries' own messages; read them with parse_event."""


@dataclass(frozen=True)
class LocalWorker:
    index: int
    command: list[str]
    env: dict[str, str]


def local_workers(job: LongContextJob, run_dir: Path, coordinator_port: int) -> list[LocalWorker]:
    """The rendered pods as local processes (pure apart from writing the trainer config)."""
    layout, _ = resolve_layout(job.spec)
    rendered = render_workload(job, layout, 1)
    config_map, workload = rendered.config_map, rendered.job
    config_path = run_dir / names.CONFIG_FILE
    config_path.write_text(config_map["data"][names.CONFIG_FILE])
    container = workload["spec"]["template"]["spec"]["containers"][0]
    command = [sys.executable if c == "python" else c for c in container["command"]] + container.get("args", [])
    if "--config" in command:
        command[command.index("--config") + 1] = str(config_path)
    # Rank 0's DNS name and port become this host's loopback and a free port.
    local = {
        podenv.COORDINATOR_ADDRESS: f"127.0.0.1:{coordinator_port}",
        podenv.MASTER_ADDR: "127.0.0.1",
        podenv.MASTER_PORT: str(coordinator_port),
        podenv.CONFIG: str(config_path),
    }
    local |= {torchrun: local[torch] for torchrun, torch in podenv.TORCHRUN.items() if torch in local}
    workers = []
    for index in range(workload["spec"]["completions"]):
        env = {}
        for var in container["env"]:
            if "valueFrom" in var:  # the completion index label: the only downward-API value
                env[var["name"]] = str(index)
            else:
                env[var["name"]] = local.get(var["name"], var["value"])
        env[podenv.COMPLETION_INDEX] = str(index)
        # Ports are per host: give every process of every local "pod" its own metrics port.
        env[podenv.LOCAL_PROCESS_ID] = str(index * layout.processes_per_node)
        workers.append(LocalWorker(index, command, env))
    return workers


def parse_event(line: str) -> dict | None:
    """A trainer progress event in a line of worker output, or None.

    Native libraries (gloo) write to the same stdout in several pieces, so an event line may
    follow a fragment of their text on the same line.
    """
    start = line.find('{"event"')
    if start < 0:
        return None
    try:
        event = json.loads(line[start:])
    except ValueError:
        return None
    return event if isinstance(event, dict) else None


def progress_line(event: dict, steps: int) -> str:
    parts = [
        f"step {event['step']}/{steps}",
        f"loss {event['loss']:.4f}",
        f"{event['tokens_per_second']:,.0f} tokens/s",
    ]
    if event.get("mfu") is not None:
        parts.append(f"MFU {100 * event['mfu']:.2f}%")
    return "  ".join(parts)


class LocalRun:
    def __init__(self, job: LongContextJob, run_dir: Path, out: IO[str] = sys.stdout):
        self.job = job
        self.run_dir = run_dir
        self.out = out
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        for worker in local_workers(self.job, self.run_dir, free_port()):
            log = self.run_dir / f"worker-{worker.index}.log"
            self.logs.append(log)
            stdout = subprocess.PIPE if worker.index == 0 else log.open("w")
            self.procs.append(
                subprocess.Popen(
                    worker.command,
                    env={**os.environ, **worker.env},
                    stdout=stdout,
                    stderr=log.open("w" if worker.index == 0 else "a"),
                    text=True,
                    cwd=self.run_dir,
                    start_new_session=True,
                )
            )

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 20
        for p in self.procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def _follow_rank0(self, show: Callable[[str], None]) -> None:
        rank0 = self.procs[0]
        with (self.run_dir / PROGRESS_FILE).open("w") as record:
            for line in rank0.stdout:
                record.write(line)
                event = parse_event(line)
                if event is None:
                    continue
                if event.get("event") == "step":
                    show(progress_line(event, self.job.spec.steps))
                elif event.get("event") == "checkpoint":
                    show(f"checkpoint at step {event['step']} ({event['seconds']:.1f} s)")
                elif event.get("event") == "resume":
                    show(f"resumed from the checkpoint of step {event['step']}")
                elif event.get("event") == "init":
                    show(
                        f"weights from {event['from']} ({event['seconds']:.1f} s)"
                        + "".join(f"; training with {note}" for note in event["notes"])
                    )

    def wait(self) -> int:
        """Follow progress until all workers exit; returns 0, or the first failure's exit code."""
        interactive = self.out.isatty()

        def show(text: str) -> None:
            self.out.write(("\r\033[K" + text) if interactive else text + "\n")
            self.out.flush()

        follower = threading.Thread(target=self._follow_rank0, args=(show,), daemon=True)
        follower.start()
        failure = first_failure(self.procs)
        if failure:
            self.stop()
        follower.join(timeout=5)
        if interactive:
            self.out.write("\n")
        if failure:
            index, code = failure
            tail = self.logs[index].read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise WorkerFailed(index, code, self.logs[index], tail[0])
        return 0


class WorkerFailed(Exception):
    def __init__(self, index: int, code: int, log: Path, last_line: str):
        self.index, self.code, self.log = index, code, log
        super().__init__(f"worker {index} exited with code {code}: {last_line} (log: {log})")


def with_inputs_from(job: LongContextJob, folder: Path) -> LongContextJob:
    """The job with relative input paths (spec.data.path, spec.initFrom.path) made absolute
    against `folder`, the manifest's own; URLs and absolute paths stay as written."""

    def absolute(path: str | None) -> str | None:
        if path is None or "://" in path or Path(path).is_absolute():
            return path
        return str((folder / path).resolve())

    spec = job.spec
    data = spec.data.model_copy(update={"path": absolute(spec.data.path)})
    init_from = spec.init_from.model_copy(update={"path": absolute(spec.init_from.path)}) if spec.init_from else None
    return job.model_copy(update={"spec": spec.model_copy(update={"data": data, "init_from": init_from})})


def _interrupted(signum, frame):
    raise KeyboardInterrupt


def run(job: LongContextJob, run_dir: Path, out: IO[str] = sys.stdout) -> int:
    """Runs the job's workers until they finish. Ctrl-C or SIGTERM stops every worker, also when
    this process inherited SIGINT ignored (as a background job of a non-interactive shell does)."""
    handlers = {number: signal.signal(number, _interrupted) for number in (signal.SIGINT, signal.SIGTERM)}
    local = LocalRun(job, run_dir, out)
    try:
        local.start()
        return local.wait()
    except KeyboardInterrupt:
        local.stop()
        raise
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
