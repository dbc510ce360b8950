"""In-pod launcher: `python -m longctx_trainer.launch --config FILE` is every trainer pod's command.

It stays the pod's first process (PID 1) and starts the trainer processes as its children: the
kernel ignores a signal to PID 1 that has no handler, and the trainer must die at once on SIGTERM
or SIGINT (see __main__.py), which only a child with the default dispositions does. With one
process per pod the child gets the pod's environment unchanged (JAX_PROCESS_ID is already the
pod's completion index). With LONGCTX_PROCESSES_PER_POD = P > 1 (NVSHMEM needs one GPU per
process) it starts P: process l of pod i gets JAX_PROCESS_ID = i * P + l, JAX_LOCAL_DEVICE_IDS =
its LONGCTX_DEVICES_PER_PROCESS GPUs and LONGCTX_LOCAL_PROCESS_ID = l (which offsets its metrics
port). JAX cannot lose a process, so when one exits non-zero the others are stopped and the pod
fails with that exit code; SIGTERM and SIGINT are forwarded to every process. After a SIGTERM it
kills a process that can no longer stop well (blocked with a dead peer, trainer/stopwatch.py).

With in-place restart on (podenv.RESTART_ADDRESS and IN_PLACE_RESTARTS set, trainer/inplace.py), a
trainer's failure is first reported to the gang's restart coordinator (served by rank 0's
launcher): when the gang agrees, every launcher kills its trainer processes and starts them again
(RESTART_EPOCH counts the restarts), inside the same pods; otherwise the pod fails as above.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping

import yaml

from .contract import podenv
from .contract.config import load_config
from .contract.processes import WOKEN, first_failure
from .contract.termination import PREEMPTED_EXIT_CODE
from .inplace import ANSWER_SECONDS, START_SECONDS, Client, Message, Server, log, parse_address
from .stopwatch import StopWatch, read_health

TRAINER = [sys.executable, "-m", "longctx_trainer"]


def process_env(environ: Mapping[str, str], local: int) -> dict[str, str]:
    """The environment of local process `local` of this pod."""
    per_pod = int(environ[podenv.PROCESSES_PER_POD])
    pod_index = int(environ[podenv.COMPLETION_INDEX])
    per_process = int(environ.get(podenv.DEVICES_PER_PROCESS, "1"))
    first = local * per_process
    return {
        **environ,
        podenv.PROCESS_ID: str(pod_index * per_pod + local),
        podenv.LOCAL_DEVICE_IDS: ",".join(str(d) for d in range(first, first + per_process)),
        # Offset by the pod's own base (set by `longctx run`, where pods share one host).
        podenv.LOCAL_PROCESS_ID: str(int(environ.get(podenv.LOCAL_PROCESS_ID, "0")) + local),
    }


def metrics_ports(args: list[str], envs: list[Mapping[str, str]]) -> list[int | None]:
    """Each process's metrics port (config.metrics.port plus its local process id); None where the
    process serves none or the config cannot be read (the trainer reports that itself)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--config")
    known, _ = parser.parse_known_args(args)
    try:
        port = load_config(known.config).metrics.port if known.config else 0
    except (OSError, ValueError, yaml.YAMLError):
        port = 0
    return [port + int(env.get(podenv.LOCAL_PROCESS_ID, "0")) if port else None for env in envs]


def exit_code(code: int) -> int:
    """A pod's exit code for a process's: a signal's number as the shell shows it (128 + n)."""
    return code if code > 0 else 128 - code


def stop_all(procs: list[subprocess.Popen], kill: bool = False, seconds: float = 30) -> bool:
    """Terminate (or kill) every process still running and wait; True when all have exited."""
    for p in procs:
        if p.poll() is None:
            p.kill() if kill else p.terminate()
    for p in procs:
        try:
            p.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            p.kill()
            try:
                p.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                return False
    return True


def supervise(procs: list[subprocess.Popen], stuck: Callable[[], Iterable[int]] = tuple) -> int:
    """Wait for all; on the first failure terminate the rest and return its exit code."""
    failure = first_failure(procs, stuck=stuck)
    if failure is None:
        return 0
    stop_all(procs)
    return exit_code(failure[1])


def in_place_client(environ: Mapping[str, str]) -> Client | None:
    """This pod's connection to the gang's restart coordinator (rank 0's launcher serves it), or
    None where in-place restart is off or cannot work (then a failure fails the pod)."""
    address, budget = environ.get(podenv.RESTART_ADDRESS), environ.get(podenv.IN_PLACE_RESTARTS, "0")
    if not address or not budget.isdigit() or int(budget) == 0:
        return None
    try:
        host, port = parse_address(address)
        pod = int(environ[podenv.COMPLETION_INDEX])
        pods = int(environ[podenv.NUM_PROCESSES]) // int(environ.get(podenv.PROCESSES_PER_POD, "1"))
        if pod == 0:
            Server(port, pods, int(budget), log).start()
    except (KeyError, ValueError, OSError) as error:
        log(f"in-place restart off: {error}")
        return None
    client = Client(host, port, pod, log)
    client.start()
    return client


class InPlace:
    """The launcher's side of in-place restarts: its trainer processes, started again when the gang
    agrees (trainer/inplace.py)."""

    def __init__(self, client: Client, spawn: Callable[[int], list[subprocess.Popen]], per_pod: int):
        self.client, self.spawn, self.per_pod = client, spawn, per_pod
        self.epoch = 0
        self.procs = spawn(0)
        self.signalled = False
        """A SIGTERM or SIGINT came: the pod is stopping, restart nothing."""

    def supervise(self, stuck: Callable[[], Iterable[int]] = tuple) -> int:
        while True:
            failure = first_failure(self.procs, stuck=stuck, wake=self.client.pending)
            if failure is None:
                return 0
            if failure == WOKEN:
                message = self.client.next(timeout=0)
                if message is not None and message.kind == "RESTART" and not self.signalled:
                    if not self.restart(message):
                        return exit_code(message.args[2])
                continue  # a GIVEUP: another pod fails; this one carries on as without in-place
            index, code = failure
            if self.signalled or code == PREEMPTED_EXIT_CODE or not self.client.usable:
                stop_all(self.procs)
                return exit_code(code)
            stop_all(self.procs, kill=True)  # its peers in this pod are blocked with the dead one
            rank = self._rank(index)
            self.client.send(Message("FAILED", (self.client.pod, self.epoch, rank, exit_code(code))))
            message = self._await("RESTART", ANSWER_SECONDS)
            if message is None or not self.restart(message):
                log(f"in-place restart not agreed; this pod fails with its trainer's exit code {exit_code(code)}")
                return exit_code(code)

    def _rank(self, index: int) -> int:
        return self.client.pod * self.per_pod + index

    def _await(self, kind: str, seconds: float) -> Message | None:
        """The coordinator's next message if it is `kind` and comes within `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0 and not self.signalled:
            message = self.client.next(timeout=min(left, 0.5))
            if message is not None:
                return message if message.kind == kind else None
            if not self.client.usable and not self.client.pending():
                return None
        return None

    def restart(self, order: Message) -> bool:
        """Stop this pod's trainers, tell the coordinator, start them again on its START; False
        when the gang does not agree (the pod then fails)."""
        epoch, rank, code = order.args
        log(
            f"in-place restart {epoch}: rank {rank} failed with exit code {code}; "
            f"stopping this pod's {len(self.procs)} trainer process(es)"
        )
        if not stop_all(self.procs, kill=True) or self.signalled:
            return False
        if not self.client.send(Message("STOPPED", (self.client.pod, epoch))):
            return False
        if self._await("START", START_SECONDS) is None or self.signalled:
            return False
        log(f"in-place restart {epoch}: starting this pod's trainer process(es) again")
        self.epoch = epoch
        self.procs = self.spawn(epoch)
        return True


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    per_pod = int(os.environ.get(podenv.PROCESSES_PER_POD, "1"))
    envs = [dict(os.environ)] if per_pod == 1 else [process_env(os.environ, local) for local in range(per_pod)]
    ports = metrics_ports(args, envs)
    watches: dict[int, StopWatch] = {}
    client = in_place_client(os.environ)

    def spawn(epoch: int) -> list[subprocess.Popen]:
        epoch_env = {podenv.RESTART_EPOCH: str(epoch)} if client is not None else {}
        return [subprocess.Popen(TRAINER + args, env=env | epoch_env) for env in envs]

    in_place = InPlace(client, spawn, per_pod) if client is not None else None
    procs = in_place.procs if in_place is not None else spawn(0)

    def current() -> list[subprocess.Popen]:
        return in_place.procs if in_place is not None else procs

    def forward(signum, frame):
        if in_place is not None:
            in_place.signalled = True
        if signum == signal.SIGTERM and not watches:
            watches.update({i: StopWatch(time.monotonic()) for i, port in enumerate(ports) if port})
        for p in current():
            if p.poll() is None:
                p.send_signal(signum)

    def stuck() -> list[int]:
        return [
            i
            for i, watch in watches.items()
            if current()[i].poll() is None and watch.stuck(read_health(ports[i]), time.monotonic())
        ]

    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, forward)
    return in_place.supervise(stuck) if in_place is not None else supervise(procs, stuck)


if __name__ == "__main__":
    sys.exit(main())
