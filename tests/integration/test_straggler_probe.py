"""A rank with a really slow device, in a synchronous gang: its step time is no longer than the
others' (every rank waits for it at the gradient all-reduce), its compute probe
(trainer/probe.py) is, and the operator's straggler attribution (operator/straggler.py) names it
by the probe and no one by the step times.

Two `python -m longctx_trainer` processes over gloo (data 2, one CPU device each), each pinned to
its own CPU. Once both train, rank 1's CPU is shared with HOGS busy-loop processes the test
starts, and rank 1 runs at a lower priority (nice 5), so its device (the CPU) gives it a small
share of its time, whatever else the machine runs. Nothing in the trainer is faked. The operator's own
code reads each rank's real exporter (watchdog.rank_read) round after round and folds the reads
as the watchdog does (stall.track, straggler.mark_slow). Only ratios between the two ranks of
this run are compared.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from statistics import median

import pytest
import yaml

from longctx_operator.stall import RankRead, track
from longctx_operator.straggler import PROBE, StragglerBounds, mark_slow, stragglers
from longctx_operator.watchdog import rank_read
from longctx_trainer.contract.health import PROBE_KEPT as KEPT
from support.ports import free_port

pytestmark = pytest.mark.integration

PROBE_EVERY = 4
CONFIG = {
    "model": {"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 384, "vocab": 256},
    "sequence_length": 512,
    "global_batch_tokens": 1024,
    "steps": 100_000,  # stopped by the test
    "precision": "fp32",
    "remat": False,
    "parallelism": {"data": 2, "context": 1, "tensor": 1},
    "data": {"kind": "synthetic", "seed": 1},
}
PROBES = 6
"""Probe times of each rank read once the probe time is from probes beside the busy loop only."""
BOUNDS = StragglerBounds(slower_percent=20, window_seconds=3)
"""20 %: with two ranks the median is their mean, so rank 1 is named from 1.5 x rank 0's time."""
SLOW_NICE = 5
HOGS = 2


def _pinned(cpu: int, nice: int = 0):
    def setup():
        os.sched_setaffinity(0, {cpu})
        os.nice(nice)

    return setup


def _start_rank(folder: Path, rank: int, port: int, coordinator: str, cpu: int, nice: int) -> subprocess.Popen:
    config = folder / f"rank{rank}.yaml"
    config.write_text(yaml.safe_dump({**CONFIG, "metrics": {"port": port, "probe_every_steps": PROBE_EVERY}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=coordinator,
        JAX_NUM_PROCESSES="2",
        JAX_PROCESS_ID=str(rank),
    )
    return subprocess.Popen(
        [sys.executable, "-m", "longctx_trainer", "--config", str(config)],
        env=env,
        stdout=(folder / f"rank{rank}.out").open("w"),
        stderr=(folder / f"rank{rank}.err").open("w"),
        preexec_fn=_pinned(cpu, nice),
    )


def _read(rank: int, port: int) -> RankRead:
    try:
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        body = None
    return rank_read(rank, f"strag-g1-{rank}", f"cpu-{rank}", body)


def _probes(rounds: list[tuple[float, list[RankRead]]], rank: int, started: int) -> set[float]:
    """The rank's probe times read at steps from `started` + PROBE_EVERY x KEPT (the median of
    probes after `started` only)."""
    return {
        reads[rank].probe_seconds
        for _, reads in rounds
        if reads[rank].probe_seconds and (reads[rank].step or 0) >= started + PROBE_EVERY * KEPT
    }


def test_the_compute_probe_names_the_rank_whose_device_is_slow(tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("needs two CPUs to pin the ranks apart")
    fast_cpu, slow_cpu = cpus[:2]
    ports = [free_port(), free_port()]
    coordinator = f"127.0.0.1:{free_port()}"
    ranks = [
        _start_rank(tmp_path, 0, ports[0], coordinator, fast_cpu, 0),
        _start_rank(tmp_path, 1, ports[1], coordinator, slow_cpu, SLOW_NICE),
    ]
    hogs: list[subprocess.Popen] = []
    rounds: list[tuple[float, list[RankRead]]] = []
    try:
        deadline = time.monotonic() + 300
        while not all(_read(r, p).phase == "training" for r, p in enumerate(ports)):
            if time.monotonic() > deadline or any(w.poll() is not None for w in ranks):
                pytest.fail(f"the ranks did not start training: {(tmp_path / 'rank1.err').read_text()[-3000:]}")
            time.sleep(0.5)
        hogs = [
            subprocess.Popen([sys.executable, "-c", "while True: pass"], preexec_fn=_pinned(slow_cpu))
            for _ in range(HOGS)
        ]
        started = None
        deadline = time.monotonic() + 300
        while True:  # read both ranks every 0.5 s until each has served PROBES probes since the hogs
            reads = [_read(r, p) for r, p in enumerate(ports)]
            if started is None:  # from the first step that ran entirely beside the hogs
                started = max(r.step or 0 for r in reads) + 1
            rounds.append((time.monotonic(), reads))
            probed = [_probes(rounds, rank, started) for rank in (0, 1)]
            if min(len(p) for p in probed) >= PROBES:
                break
            if time.monotonic() > deadline or any(w.poll() is not None for w in ranks):
                pytest.fail(f"too few probes read: {probed}: {(tmp_path / 'rank1.err').read_text()[-3000:]}")
            time.sleep(0.5)
    finally:
        for process in [*ranks, *hogs]:
            process.kill()
            process.wait()

    steady = [(t, reads) for t, reads in rounds if all((r.step or 0) >= started + PROBE_EVERY * KEPT for r in reads)]
    step_times = [median({rs[rank].step: rs[rank].step_seconds for _, rs in steady}.values()) for rank in (0, 1)]
    probe_times = [median(p) for p in probed]

    # the operator, reading the same rounds: rank 1 by its probe, no one by the step times alone
    def attribution(strip_probes: bool):
        tracks = {}
        for now, reads in steady:
            if strip_probes:
                reads = [dataclasses.replace(r, probe_seconds=None) for r in reads]
            tracks = mark_slow(track(tracks, reads, now), now, BOUNDS)
        return stragglers(tracks, steady[-1][0], BOUNDS)

    found = attribution(False)
    print(f"step s (rank 0, 1): {step_times}; probe s: {probe_times}; {len(steady)} rounds; {found}")

    # the collectives equalise the step times; the probe tells the ranks apart
    assert max(step_times) / min(step_times) < 1.25, step_times
    assert probe_times[1] / probe_times[0] > 1.5, probe_times

    assert [(s.rank, s.measure) for s in found] == [(1, PROBE)]
    assert attribution(True) == ()
