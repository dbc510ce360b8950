"""A hostile metrics endpoint beside honest ones, against the operator as a real process on the
local control plane (docs/security.md, docs/operator.md#live-progress).

One job's rank 0 serves, read after read, the worst exposition shapes (a 1 MiB `#` line of
spaces, label values of escaped quotes, runs of backslashes) and the slowest answers (silence, a
head trickled a byte at a time, chunks trickled a byte at a time, `100 Continue` forever); nine
honest jobs serve the trainer's own exporter output. Every honest job must keep being read and
updated at its interval, and the operator's /healthz must answer within 1 s, throughout.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import pytest
from prometheus_client import generate_latest

from longctx_trainer.contract.metrics import TrainMetrics
from support import operator_harness as h
from support.hostile_metrics import SLOW_ANSWERS, WORST_BODIES, Handler, serve, slow_answer

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("suspend_leftovers")]

POOL = "hostile-metrics-tests"
HONEST_JOBS = 9
TICK = 0.5
"""Seconds between the test's looks at the operator (each also probes /healthz)."""
STALL_TICKS = 10
"""An honest job not read for this many ticks (5 s: five of the test operator's 1 s intervals) has
stalled."""
# The worst bodies (each read succeeds: they end with a valid step line) between the slow
# answers (each read fails at the deadline), so the hostile job is read about every other second.
MODES = [m for pair in zip(SLOW_ANSWERS, [*WORST_BODIES] * 2, strict=False) for m in pair]


class Hostile(Handler):
    """Serves MODES in turn, one per request."""

    served: list[str] = []
    lock = threading.Lock()

    def answer(self, path: str) -> None:
        with self.lock:
            mode = MODES[len(self.served) % len(MODES)]
            self.served.append(mode)
        if mode in WORST_BODIES:
            self.ok(WORST_BODIES[mode])
        else:
            slow_answer(mode, self.raw)


class Honest(Handler):
    """/<job>: the trainer's exporter output, its step the number of reads of that job so far."""

    reads: dict[str, int] = {}
    lock = threading.Lock()

    def answer(self, path: str) -> None:
        name = path.strip("/")
        with self.lock:
            self.reads[name] = step = self.reads.get(name, 0) + 1
        metrics = TrainMetrics(name, 0)
        metrics.observe_step(step, tokens=4096, seconds=0.5, loss=2.0, mfu={("causal", "bf16"): 0.3})
        self.ok(generate_latest(metrics.registry))


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    """The operator (reading progress every second), and two GPU nodes of this module's own pool."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=2)
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes) as op:
        yield op


def healthy(operator) -> str | None:
    """None when /healthz answers within 1 s, else why not."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{operator.liveness_port}/healthz", timeout=1) as response:
            return None if response.status == 200 else f"status {response.status}"
    except OSError as e:
        return f"{type(e).__name__}: {e}"


def test_a_hostile_endpoint_stalls_neither_the_operator_nor_other_jobs_progress(operator, kubectl, wait_until):
    hostile_server, hostile_url = serve(Hostile)
    honest_server, honest_url = serve(Honest)
    honest = [f"honest-{i}" for i in range(HONEST_JOBS)]
    try:
        for name, url in [("hostile", hostile_url + "/metrics")] + [(n, f"{honest_url}/{n}") for n in honest]:
            kubectl.apply(
                h.job_manifest(
                    name,
                    nodes=1,
                    pool=POOL,
                    steps=1_000_000,
                    resources={"gpusPerNode": 1},
                    scheduling={"admission": "none"},
                    pod_annotations={"longctx.io/keep-running": "true"},
                    annotations={"longctx.io/metrics-url": url},
                )
            )
        wait_until(
            lambda: (
                [(o.get("status") or {}).get("phase") for o in kubectl.json("get", "lcj")["items"]]
                == ["Running"] * (HONEST_JOBS + 1)
            ),
            timeout=120,
            what="all ten jobs Running",
        )
        wait_until(lambda: all(Honest.reads.get(n) for n in honest), timeout=30, what="every honest job read")

        # Until the hostile job has been served every mode: each tick probes /healthz and notes
        # which honest jobs were read since the last one.
        unhealthy, stalled, ticks = [], {n: 0 for n in honest}, 0
        last = dict(Honest.reads)
        served_at_start = len(Hostile.served)
        deadline = time.monotonic() + 240
        while len(Hostile.served) < served_at_start + len(MODES):
            if time.monotonic() > deadline:
                pytest.fail(f"the hostile job was read only for {Hostile.served[served_at_start:]}: its reads stalled")
            time.sleep(TICK)
            ticks += 1
            if (why := healthy(operator)) is not None:
                unhealthy.append((ticks, why))
            now = dict(Honest.reads)
            for name in honest:
                stalled[name] = 0 if now[name] > last[name] else stalled[name] + 1
                assert stalled[name] < STALL_TICKS, (name, Hostile.served[-1], ticks)
            last = now
        assert not unhealthy, unhealthy
        reads = dict(Honest.reads)
        statuses = {o["metadata"]["name"]: o["status"] for o in kubectl.json("get", "lcj")["items"]}
    finally:
        hostile_server.shutdown()
        honest_server.shutdown()
    for name in honest:  # the reads reached the status: the step is the job's read count
        assert statuses[name]["progress"]["step"] >= reads[name] - 3, (name, statuses[name], reads[name])
    assert statuses["hostile"]["phase"] == "Running"
    assert set(Hostile.served[served_at_start:]) == set(MODES)
