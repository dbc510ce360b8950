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
from .contract.processes import first_failure
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


def supervise(procs: list[subprocess.Popen], stuck: Callable[[], Iterable[int]] = tuple) -> int:
    """Wait for all; on the first failure terminate the rest and return its exit code."""
    failure = first_failure(procs, stuck=stuck)
    if failure is None:
        return 0
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
    code = failure[1]
    return code if code > 0 else 128 - code


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    per_pod = int(os.environ.get(podenv.PROCESSES_PER_POD, "1"))
    envs = [dict(os.environ)] if per_pod == 1 else [process_env(os.environ, local) for local in range(per_pod)]
    procs = [subprocess.Popen(TRAINER + args, env=env) for env in envs]
    ports = metrics_ports(args, envs)
    watches: dict[int, StopWatch] = {}

    def forward(signum, frame):
        if signum == signal.SIGTERM and not watches:
            watches.update({i: StopWatch(time.monotonic()) for i, port in enumerate(ports) if port})
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    def stuck() -> list[int]:
        return [
            i
            for i, watch in watches.items()
            if procs[i].poll() is None and watch.stuck(read_health(ports[i]), time.monotonic())
        ]

    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, forward)
    return supervise(procs, stuck)


if __name__ == "__main__":
    sys.exit(main())
