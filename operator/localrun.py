"""`longctx run FILE`: run a job's workers as local processes with the env the operator renders.

Each pod of the rendered Indexed Job becomes one local `python -m longctx_trainer.launch` process
tree with that pod's container env on top of a few of the caller's variables (HOST_ENV, what a
container image would provide), never the caller's whole environment. Only what cannot exist
off-cluster is replaced: the coordinator's DNS name becomes 127.0.0.1 with a free port, the
completion index (a pod label) is given directly, and the processes get metrics ports of their
own: the manifest's when they are free, else free ones (printed at start), so runs side by side do
not collide. Rank 0's JSON progress lines become a live progress line; every worker's output is
appended to a log file. Workers run in the run directory, so a relative checkpoint path (an output)
lands there; relative inputs (data, initFrom) are read from the manifest's own folder, like any
file a manifest names. One run at a time holds a run directory (a lock, also held by its workers).
Ctrl-C, SIGTERM, SIGHUP (a closed terminal) or a failed worker stops them all. With in-place
restart on, the launchers restart their trainers among themselves first (trainer/inplace.py); the
run fails only when they fall back, as a pod would.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from longctx_trainer.contract import events, podenv
from longctx_trainer.contract.config import is_url
from longctx_trainer.contract.processes import first_failure

from . import names
from .api.spec import LongContextJob
from .render import render_workload
from .resolve import resolve_layout

PROGRESS_FILE = "worker-0.progress.jsonl"
"""Rank 0's full output in the run directory: its JSON progress events at full precision (the
live line rounds them) among the libraries' own messages; read them with parse_event."""

LOCK_FILE = "longctx-run.lock"
"""Held (flock) by the run using the directory and by its workers; it holds the holder's pid."""

HOST_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
)
"""The caller's variables a worker gets (where commands, libraries, temporary files and GPUs are),
with the job's rendered env (spec.env included) on top; no other: no tokens or credentials."""

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

PORT_CLAIMS = Path(tempfile.gettempdir()) / f"longctx-ports-{os.getuid()}"
"""Lock files of the ports that this user's live runs chose and their workers may not yet bind."""


class RunDirBusy(Exception):
    """The run directory is held by another live run."""


def lock_run_dir(run_dir: Path) -> int:
    """Takes the run directory's lock and returns its descriptor (released when every process
    holding it exits); raises RunDirBusy naming the holder."""
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(run_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise RunDirBusy(
            f"in use by another `longctx run` (pid {holder}) or its workers; wait for it to end or choose another"
        ) from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def _port_free(port: int) -> bool:
    """Whether a server can listen on the port (as the trainers' do: all addresses, SO_REUSEADDR)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def _claim(port: int) -> int | None:
    """The lock of a port no other live run has claimed, or None."""
    PORT_CLAIMS.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(PORT_CLAIMS / f"{port}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def claim_ports(count: int, preferred: int | None = None, tries: int = 50) -> tuple[int, list[int]]:
    """`count` consecutive ports that are free and claimed by no other live run: from `preferred`
    when they are, else from a port the kernel picks. Returns the first and the claims' locks
    (the run holds them to its end, so that a run starting meanwhile picks others)."""
    for attempt in range(tries):
        if attempt == 0 and preferred is not None:
            first = preferred
        else:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                first = s.getsockname()[1]
        if first + count - 1 > 65535:
            continue
        claims: list[int] = []
        for port in range(first, first + count):
            fd = _claim(port)
            if fd is None or not _port_free(port):
                if fd is not None:
                    os.close(fd)
                break
            claims.append(fd)
        else:
            return first, claims
        for fd in claims:
            os.close(fd)
    raise OSError(f"found no {count} consecutive free ports in {tries} tries")


@dataclass(frozen=True)
class LocalWorker:
    index: int
    command: list[str]
    env: dict[str, str]


def downward_value(field_path: str, index: int) -> str:
    """A downward-API value on this machine: the completion index, this host as the node, and no
    other pod label (no node topology labels are copied onto a local "pod")."""
    if field_path == f"metadata.labels['{names.COMPLETION_INDEX_LABEL}']":
        return str(index)
    if field_path == "spec.nodeName":
        return socket.gethostname()
    return ""


def local_workers(
    job: LongContextJob, run_dir: Path, coordinator_port: int, restart_port: int | None = None
) -> list[LocalWorker]:
    """The rendered pods as local processes (pure apart from writing the trainer config); rank 0's
    in-place restart coordinator, where the job has one, listens on `restart_port`."""
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
        podenv.PLACEMENT_FILE: "",  # no operator writes a placement: no rank waits for one
        podenv.PLACEMENT_TABLE: "",
        podenv.RESTART_ADDRESS: f"127.0.0.1:{restart_port}",
    }
    local |= {torchrun: local[torch] for torchrun, torch in podenv.TORCHRUN.items() if torch in local}
    workers = []
    for index in range(workload["spec"]["completions"]):
        env = {}
        for var in container["env"]:
            if "valueFrom" in var:
                env[var["name"]] = downward_value(var["valueFrom"]["fieldRef"]["fieldPath"], index)
            else:
                env[var["name"]] = local.get(var["name"], var["value"])
        env[podenv.COMPLETION_INDEX] = str(index)
        # Ports are per host: give every process of every local "pod" its own metrics port.
        env[podenv.LOCAL_PROCESS_ID] = str(index * layout.processes_per_node)
        workers.append(LocalWorker(index, command, env))
    return workers


def worker_environment(worker: LocalWorker, caller: Mapping[str, str]) -> dict[str, str]:
    """A worker's whole environment: the caller's HOST_ENV variables under the pod's env."""
    return {name: caller[name] for name in HOST_ENV if name in caller} | worker.env


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


def event_line(event: dict, steps: int) -> str | None:
    """What the live line shows for a progress event of rank 0 (None: nothing)."""
    kind = event.get("event")
    if kind == events.STEP:
        return progress_line(event, steps)
    if kind == "joined":
        return f"{event['processes']} processes joined ({event['backend']}); building the model"
    if kind == "compiling":
        return "compiling the training step (the first step waits for it)"
    if kind == "compiled":
        how = "loaded from the compilation cache" if event["from_cache"] else "compiled"
        return f"training step {how} in {event['seconds']:.1f} s"
    if kind == events.CHECKPOINT:
        return f"checkpoint at step {event['step']} ({event['seconds']:.1f} s)"
    if kind == events.RESUME:
        return f"resumed from the checkpoint of step {event['step']}"
    if kind == "init":
        return f"weights from {event['from']} ({event['seconds']:.1f} s)" + "".join(
            f"; training with {note}" for note in event["notes"]
        )
    return None


class LocalRun:
    def __init__(self, job: LongContextJob, run_dir: Path, out: IO[str] = sys.stdout):
        self.job = job
        self.run_dir = run_dir
        self.out = out
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.lock: int | None = None
        self.claims: list[int] = []
        self.metrics_ports = range(job.spec.metrics.port, job.spec.metrics.port)
        self.coordinator_port = 0
        self.restart_port = 0
        self.step = 0
        """The last step rank 0 reported."""
        self.checkpoint: int | None = None
        """The step of the last checkpoint rank 0 wrote or resumed from."""

    def prepare(self) -> None:
        """Takes the run directory and the ports (before anything is started)."""
        self.lock = lock_run_dir(self.run_dir)
        spec = self.job.spec
        processes = spec.resources.nodes * resolve_layout(spec)[0].processes_per_node
        first, self.claims = claim_ports(processes, spec.metrics.port)
        self.metrics_ports = range(first, first + processes)
        self.coordinator_port, claims = claim_ports(1)
        self.claims += claims
        self.restart_port, claims = claim_ports(1)
        self.claims += claims

    def start(self) -> None:
        spec = self.job.spec
        metrics = spec.metrics.model_copy(update={"port": self.metrics_ports.start})
        job = self.job.model_copy(update={"spec": spec.model_copy(update={"metrics": metrics})})
        for worker in local_workers(job, self.run_dir, self.coordinator_port, self.restart_port):
            log = self.run_dir / f"worker-{worker.index}.log"
            self.logs.append(log)
            with log.open("a") as output:  # a resumed run keeps the earlier parts' output
                self.procs.append(
                    subprocess.Popen(
                        worker.command,
                        env=worker_environment(worker, os.environ),
                        stdout=subprocess.PIPE if worker.index == 0 else output,
                        stderr=output,
                        text=True,
                        cwd=self.run_dir,
                        start_new_session=True,  # a process group of its own, stopped as one
                        pass_fds=(self.lock,),  # workers left behind keep the run directory
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

    def last_checkpoint(self) -> int | None:
        """The step of the last checkpoint rank 0 wrote or resumed from; before it says (a run
        stopped while starting), the newest one on a local checkpoint path."""
        path = self.job.spec.checkpoint.path
        if self.checkpoint is not None or is_url(path) or not (self.run_dir / path).is_dir():
            return self.checkpoint
        return max((int(d.name) for d in (self.run_dir / path).iterdir() if d.name.isdigit()), default=None)

    def release(self) -> None:
        for fd in [*self.claims, *([self.lock] if self.lock is not None else [])]:
            os.close(fd)
        self.claims, self.lock = [], None

    def _follow_rank0(self, show: Callable[[str], None]) -> None:
        rank0 = self.procs[0]
        # Line-buffered: every event is in the file as soon as rank 0 prints it.
        with (self.run_dir / PROGRESS_FILE).open("a", buffering=1) as record:
            for line in rank0.stdout:
                record.write(line)
                event = parse_event(line)
                if event is None:
                    continue
                try:
                    text = event_line(event, self.job.spec.steps)
                    if event["event"] == events.STEP:
                        self.step = int(event["step"])
                    elif event["event"] in (events.CHECKPOINT, events.RESUME):
                        self.checkpoint = int(event["step"])
                except (KeyError, TypeError, ValueError):  # a trainer of one's own, off the contract
                    continue  # keep reading: a full pipe would stop rank 0
                if text is not None:
                    show(text)

    def wait(self) -> int:
        """Follow progress until all workers exit; returns 0, or the first failure's exit code."""
        interactive = self.out.isatty()

        def show(text: str) -> None:
            try:
                self.out.write(("\r\033[K" + text) if interactive and text else text + "\n")
                self.out.flush()
            except OSError:  # the terminal is gone (SIGHUP follows): keep recording progress
                pass

        show(f"starting {len(self.procs)} workers; waiting for them to join")
        follower = threading.Thread(target=self._follow_rank0, args=(show,), daemon=True)
        follower.start()
        failure = first_failure(self.procs)
        if failure:
            self.stop()
        follower.join(timeout=5)
        if interactive:
            show("")
        if failure:
            index, code = failure
            tail = self.logs[index].read_text(errors="replace").strip().splitlines()[-1:] or [""]
            raise WorkerFailed(index, code, self.logs[index], tail[0])
        return 0


class WorkerFailed(Exception):
    def __init__(self, index: int, code: int, log: Path, last_line: str):
        self.index, self.code, self.log = index, code, log
        super().__init__(f"worker {index} exited with code {code}: {last_line} (log: {log})")


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the run; `run` is the stopped LocalRun (its step and checkpoint)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum
        self.run: LocalRun | None = None


def with_inputs_from(job: LongContextJob, folder: Path) -> LongContextJob:
    """The job with relative input paths (spec.data.path, spec.initFrom.path) made absolute
    against `folder`, the manifest's own; URLs and absolute paths stay as written."""

    def absolute(path: str | None) -> str | None:
        if path is None or is_url(path) or Path(path).is_absolute():
            return path
        return str((folder / path).resolve())

    spec = job.spec
    data = spec.data.model_copy(update={"path": absolute(spec.data.path)})
    init_from = spec.init_from.model_copy(update={"path": absolute(spec.init_from.path)}) if spec.init_from else None
    return job.model_copy(update={"spec": spec.model_copy(update={"data": data, "init_from": init_from})})


def _interrupted(signum, frame):
    raise Interrupted(signum)


def run(
    job: LongContextJob,
    run_dir: Path,
    out: IO[str] = sys.stdout,
    started: Callable[[LocalRun], None] = lambda local: None,
) -> int:
    """Runs the job's workers until they finish; `started` is called once the run directory and
    the ports are taken, before the workers start. Ctrl-C, SIGTERM or SIGHUP stops every worker
    (raising Interrupted), also when this process inherited SIGINT ignored (as a background job
    of a non-interactive shell does)."""
    handlers = {number: signal.signal(number, _interrupted) for number in STOP_SIGNALS}
    local = LocalRun(job, run_dir, out)
    try:
        local.prepare()
        started(local)
        local.start()
        return local.wait()
    except Interrupted as stop:
        for number in STOP_SIGNALS:  # a second Ctrl-C, or the SIGCONT after SIGHUP, waits for the stop
            signal.signal(number, signal.SIG_IGN)
        local.stop()
        stop.run = local
        raise
    finally:
        local.release()
        for number, handler in handlers.items():
            signal.signal(number, handler)
