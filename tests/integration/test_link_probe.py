"""A node whose network link is slow, in a synchronous gang: every rank's step time is the same (each
collective waits for the slow link), every rank's compute probe is normal, and the link probe
(trainer/probe.py, LinkProbe) names it: the operator's straggler attribution (operator/straggler.py)
names that rank by its link probe and no other rank.

Three `python -m longctx_trainer` processes over gloo (data 3, one CPU device each), each in a
network namespace of its own: a veth into one bridge, as a pod's, so each process has a link of its
own. Rank 2's is limited by the kernel's token bucket filter (`tc ... tbf`) on its host side, which
slows what reaches rank 2. Nothing in the trainer is faked. The operator's own code reads each rank's
real exporter (watchdog.rank_read) round after round and folds the reads as the watchdog does
(stall.track, straggler.mark_slow). Only ratios between the ranks of this run are compared.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from longctx_operator.stall import RankRead, track
from longctx_operator.straggler import LINK, StragglerBounds, mark_slow, stragglers
from longctx_operator.watchdog import rank_read

pytestmark = pytest.mark.integration

RANKS = 3  # the fewest nodes the link probe can tell apart (contract.health.link_rounds)
SLOW = 2
SLOW_RATE = "100mbit"  # a 4 MiB round takes about 0.35 s through it, against milliseconds beside it
METRICS_PORT = 9400  # each rank's own, in its own namespace
CONFIG = {
    "model": {"layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 384, "vocab": 256},
    "sequence_length": 512,
    "global_batch_tokens": 512 * RANKS,
    "steps": 100_000,  # stopped by the test
    "precision": "fp32",
    "remat": False,
    "parallelism": {"data": RANKS, "context": 1, "tensor": 1},
    "data": {"kind": "synthetic", "seed": 1},
    "metrics": {"port": METRICS_PORT, "probe_every_steps": 2},
}
BOUNDS = StragglerBounds(slower_percent=100, window_seconds=3)
"""100 %: a rank is slow when its link time is twice the gang's median; the limited link is ten
times slower or more."""
READS = 8


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True)


class Namespaces:
    """RANKS network namespaces on one bridge, rank k at <subnet>.k+1 (the bridge at .254), each
    resolving this machine's host name to its own address (gloo binds to that), rank SLOW's link
    limited."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:4]
        self.bridge, self.names = f"lcxl{tag}b", [f"lcxl{tag}-{k}" for k in range(RANKS)]
        self.hosts = [f"lcxl{tag}h{k}" for k in range(RANKS)]
        self.subnet = f"10.251.{int(tag, 16) % 250}"

    def address(self, rank: int) -> str:
        return f"{self.subnet}.{rank + 1}"

    def up(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        _ip("addr", "add", f"{self.subnet}.254/24", "dev", self.bridge)
        _ip("link", "set", self.bridge, "up")
        for rank, (ns, host) in enumerate(zip(self.names, self.hosts, strict=True)):
            _ip("netns", "add", ns)
            _ip("link", "add", host, "type", "veth", "peer", "name", f"{host}n")
            _ip("link", "set", f"{host}n", "netns", ns)
            _ip("link", "set", host, "master", self.bridge, "up")
            _ip("-n", ns, "link", "set", f"{host}n", "name", "eth0")
            _ip("-n", ns, "addr", "add", f"{self.address(rank)}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            etc = Path("/etc/netns") / ns  # `ip netns exec` mounts it over /etc
            etc.mkdir(parents=True)
            (etc / "hosts").write_text(f"127.0.0.1 localhost\n{self.address(rank)} {socket.gethostname()}\n")
        subprocess.run(
            ["tc", "qdisc", "add", "dev", self.hosts[SLOW], "root", "tbf"]
            + ["rate", SLOW_RATE, "burst", "64kbit", "latency", "400ms"],
            check=True,
            capture_output=True,
        )

    def down(self) -> None:
        for ns, host in zip(self.names, self.hosts, strict=True):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
            subprocess.run(["ip", "link", "del", host], capture_output=True)
            shutil.rmtree(Path("/etc/netns") / ns, ignore_errors=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


def _can_run() -> str | None:
    """Why namespaces with a limited link cannot be made here, or None."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip") or not shutil.which("tc"):
        return "ip and tc (iproute2) are needed"
    probe = f"lcxlq{uuid.uuid4().hex[:4]}"
    try:
        _ip("link", "add", probe, "type", "bridge")
        tbf = subprocess.run(
            ["tc", "qdisc", "add", "dev", probe, "root", "tbf", "rate", "1mbit", "burst", "32kbit", "latency", "400ms"],
            capture_output=True,
            text=True,
        )
    except subprocess.CalledProcessError as error:
        return f"cannot make a bridge: {error.stderr.decode().strip()}"
    finally:
        subprocess.run(["ip", "link", "del", probe], capture_output=True)
    return None if tbf.returncode == 0 else f"the kernel has no tbf qdisc: {tbf.stderr.strip()}"


@pytest.fixture
def namespaces():
    if (why := _can_run()) is not None:
        pytest.skip(why)
    made = Namespaces()
    try:
        made.up()
        yield made
    finally:
        made.down()


def _start_rank(folder: Path, ns: Namespaces, rank: int) -> subprocess.Popen:
    config = folder / f"rank{rank}.yaml"
    config.write_text(yaml.safe_dump(CONFIG))
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
    env.update(
        XLA_FLAGS="--xla_force_host_platform_device_count=1",
        JAX_PLATFORMS="cpu",
        JAX_COORDINATOR_ADDRESS=f"{ns.address(0)}:8476",
        JAX_NUM_PROCESSES=str(RANKS),
        JAX_PROCESS_ID=str(rank),
    )
    return subprocess.Popen(
        ["ip", "netns", "exec", ns.names[rank], sys.executable, "-m", "longctx_trainer", "--config", str(config)],
        env=env,
        stdout=(folder / f"rank{rank}.out").open("w"),
        stderr=(folder / f"rank{rank}.err").open("w"),
    )


def _read(ns: Namespaces, rank: int) -> RankRead:
    try:
        with urllib.request.urlopen(f"http://{ns.address(rank)}:{METRICS_PORT}/metrics", timeout=5) as r:
            body = r.read()
    except OSError:
        body = None
    return rank_read(rank, f"rank-{rank}", ns.names[rank], body)


def test_a_slow_link_is_named_by_the_link_probe_and_by_nothing_else(namespaces, tmp_path):
    ranks = [_start_rank(tmp_path, namespaces, rank) for rank in range(RANKS)]
    try:
        deadline = time.monotonic() + 300
        while not all(_read(namespaces, rank).link_seconds for rank in range(RANKS)):
            for rank, process in enumerate(ranks):
                assert process.poll() is None, (tmp_path / f"rank{rank}.err").read_text()[-3000:]
            if time.monotonic() > deadline:
                pytest.fail("no link probe from every rank in 300 s")
            time.sleep(1)
        tracks, reads = {}, []
        for _ in range(READS):
            now = time.monotonic()
            round_ = [_read(namespaces, rank) for rank in range(RANKS)]
            reads.append(round_)
            tracks = mark_slow(track(tracks, round_, now), now, BOUNDS)
            time.sleep(1)
        named = stragglers(tracks, time.monotonic(), BOUNDS)
    finally:
        for process in ranks:
            process.kill()
            process.wait(timeout=30)
    links = {read.rank: read.link_seconds for read in reads[-1]}
    probes = {read.rank: read.probe_seconds for read in reads[-1]}
    steps = {read.rank: read.step_seconds for read in reads[-1]}
    seen = f"link {links}, compute probe {probes}, step {steps}"
    assert [(s.rank, s.measure) for s in named] == [(SLOW, LINK)], seen
    assert links[SLOW] > 5 * max(seconds for rank, seconds in links.items() if rank != SLOW), seen
    assert max(probes.values()) < 2 * min(probes.values()), seen  # its devices are as fast as the others'
    assert max(steps.values()) < 2 * min(steps.values()), seen  # the gang waits for its link at every step
