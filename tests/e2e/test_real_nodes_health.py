"""Hang detection and a lost node end to end on real nodes (docs/operator.md, "Hang detection",
"A lost node"). One rank's trainer process is stopped with SIGSTOP mid-run; its exporter stops
answering and the other rank waits in a collective. The operator's watchdog reads both ranks, finds
that none advanced for the bound, sets Stalled naming the stopped rank, restarts the gang, which
resumes from its last checkpoint and Succeeds. Then a node under a running gang dies (its pod
network goes silent and its kubelet, containerd and containers are killed): the gang restarts on
the two healthy nodes long before Kubernetes' 300 s eviction and resumes. The module's cluster
has three real nodes for that. The trainer's and the operator's images are built from this tree."""

from __future__ import annotations

import json
import subprocess
import time
from datetime import UTC, datetime

import pytest
from e2e.conftest import CLUSTER
from e2e.test_real_nodes import NAME, Job, check_joined, checkpointing, events, phase, resumed_at

from longctx_operator.observe import pod_rank
from longctx_trainer.contract.health import PHASES
from longctx_trainer.contract.podenv import FAULT_FREEZE_IN_RENDEZVOUS
from support.recovery import breakdown, table

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

CHECKPOINT_INTERVAL = 5
FLOOR_SECONDS = 20
"""hangDetection.floorSeconds of the test's job: its steps take well under 2 s (10 x 2 s = 20 s)."""
REAL_NODES = 3
"""The module's cluster (tests/e2e/conftest.py): a two-rank gang and a spare node."""
STRAGGLER_PERCENT = 20
"""With two ranks the median is their mean: rank 1 is named once its probe takes 1.5 x rank 0's."""
HOGS = 6
"""Busy loops in rank 1's container: with the trainer's few threads they share its one-CPU limit,
so its probe gets about a third of a CPU, wherever the machine's other load leaves rank 0."""
HOG_LOOPS = f"for hog in {' '.join(map(str, range(HOGS)))}; do (while :; do :; done) >/dev/null 2>&1 & done"
NODE_LOST_SECONDS = 2
EVICTION_SECONDS = 300
"""Kubernetes' default toleration of a NotReady or unreachable node."""


def test_a_stopped_rank_is_named_stalled_and_the_gang_resumes(real_cluster):
    """Rank 1's trainer is stopped (SIGSTOP) as the first checkpoint is saved, so the gang cannot
    finish its 30 steps; the watchdog names it Stalled and the gang resumes from a checkpoint."""
    job = Job(
        real_cluster,
        checkpointing(
            30,
            CHECKPOINT_INTERVAL,
            restartPolicy={"maxRestarts": 0, "maxStallRestarts": 1, "backoffSeconds": 1},
            hangDetection={"floorSeconds": FLOOR_SECONDS, "stepFactor": 10},
        ),
    )
    try:
        job.wait_for_a_checkpoint()
        stopped = job.pods(1)[1]["metadata"]["name"]
        # PID 1 is the launcher; its child is the trainer (the rank's process, exporter included).
        real_cluster.kubectl(
            "exec", "-n", job.namespace, stopped, "-c", "trainer", "--",
            "sh", "-c", "kill -STOP $(cat /proc/1/task/1/children)",
        )  # fmt: skip
        first_rank0, _ = check_joined(job, 1)
        restarted = job.wait(
            lambda current: (current.get("status") or {}).get("stallRestarts") == 1,
            "the stall restart",
            timeout=300,
        )
        assert restarted["status"]["restarts"] == 0, restarted["status"]  # counted apart from failures
        messages = job.warnings("Stalled")
        # the phase is the one rank 1 was in at the watchdog's last answered read: training, a save,
        # or (when the gang reached its first checkpoint between two reads) still compiling
        named = [f"rank 1 (pod {stopped}, phase {p}," for p in PHASES]
        assert any(any(n in m for n in named) and "not answering" in m for m in messages), messages
        assert not any("rank 0 (" in m for m in messages), messages
        final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
        assert phase(final) == "Succeeded" and final["status"]["workloadGeneration"] == 2, job.describe(final)
        last_rank0, _ = check_joined(job, 2)
        assert resumed_at(last_rank0) % CHECKPOINT_INTERVAL == 0  # an interval checkpoint: no save on a hang
        assert last_rank0[-1] == {"event": "done", "step": job.steps}
        assert not any(e["event"] == "resume" for e in first_rank0)
        assert [e for e in events(job.log_text(job.pods(2)[0])) if e["event"] == "done"]
    finally:
        job.delete()


def test_a_rank_that_never_joins_the_rendezvous_is_named_stalled_in_phase_rendezvous(real_cluster):
    """Rank 1 stops itself in the rendezvous once the watchdog has read it there (the trainer's
    fault-injection env, trainer/faults.py); rank 0 waits for it. Past hangDetection.startupSeconds
    the gang is Stalled naming rank 1 only, in phase rendezvous; with no stall restart allowed the
    job Fails."""
    job = Job(
        real_cluster,
        {
            "env": [{"name": FAULT_FREEZE_IN_RENDEZVOUS, "value": "1"}],
            "restartPolicy": {"maxRestarts": 0, "maxStallRestarts": 0},
            # the watchdog reads every 10 s and rank 1 stops at its second read: well within the bound
            "hangDetection": {"startupSeconds": 60, "floorSeconds": FLOOR_SECONDS},
        },
    )
    try:
        job.wait(lambda current: len(job.pods(1)) == 2, "generation 1's pods")
        frozen = job.pods(1)[1]["metadata"]["name"]
        final = job.wait(lambda current: phase(current) == "Failed", "the job to be Failed (Stalled)", timeout=300)
        assert final["status"]["reason"] == "Stalled", job.describe(final)
        assert final["status"]["workloadGeneration"] == 1
        message = final["status"]["message"]
        assert "has not reached its first step" in message, message
        assert f"rank 1 (pod {frozen}" in message and "phase rendezvous, not answering)" in message, message
        assert "rank 0 (" not in message, message
    finally:
        job.delete()


def test_a_rank_starved_of_its_cpu_is_named_the_straggler_by_its_compute_probe(real_cluster):
    """Once the gang trains, HOGS busy loops start in rank 1's trainer container, which then shares
    its pod's one-CPU limit with them: its compute probe (trainer/probe.py) takes several times
    rank 0's, while the gradient all-reduce keeps the two ranks' step times equal. The operator's
    watchdog names rank 1, and only rank 1, in the Straggler condition, by the probe."""
    job = Job(
        real_cluster,
        {
            "steps": 5000,  # deleted by the test once it has the verdict
            "sequenceLength": 512,
            "globalBatchTokens": 1024,
            "stragglerDetection": {"slowerPercent": STRAGGLER_PERCENT, "windowSeconds": 10},
        },
    )
    try:
        job.wait(lambda current: ((current.get("status") or {}).get("progress") or {}).get("step"), "the first step")
        slowed = job.pods(1)[1]["metadata"]["name"]
        real_cluster.kubectl(
            "exec", "-n", job.namespace, slowed, "-c", "trainer", "--",
            "sh", "-c", HOG_LOOPS,
        )  # fmt: skip
        named = job.wait(
            lambda current: any(
                c["type"] == "Straggler" and c["status"] == "True"
                for c in (current.get("status") or {}).get("conditions", [])
            ),
            "the Straggler condition",
            timeout=300,
        )
        (straggler,) = [c for c in named["status"]["conditions"] if c["type"] == "Straggler"]
        message = straggler["message"]
        print(f"straggler: {message}")
        assert f"rank 1 (pod {slowed}" in message and "for the compute probe" in message, message
        assert "rank 0 (" not in message, message
        assert phase(named) == "Running" and named["status"].get("stallRestarts", 0) == 0, job.describe(named)
    finally:
        job.delete()


def test_a_dead_node_restarts_the_gang_on_healthy_nodes_before_the_eviction_timeout(real_cluster):
    """Last in the module: the dead node stays dead. The node dies as the first checkpoint (step
    10) is saved: its rank's processes die with it, so the gang cannot finish its 40 steps before
    the restart."""
    job = Job(
        real_cluster,
        checkpointing(
            40, 10, restartPolicy={"maxRestarts": 1, "backoffSeconds": 1, "nodeLostSeconds": NODE_LOST_SECONDS}
        ),
    )
    try:
        job.wait_for_a_checkpoint()
        check_joined(job, 1)
        operators = json.loads(real_cluster.kubectl("get", "pods", "-n", "longctx-system", "-o", "json"))["items"]
        spared = {p["spec"].get("nodeName") for p in operators}  # the operator must outlive the node
        victim = next(p for p in reversed(job.pods(1)) if p["spec"]["nodeName"] not in spared)
        node, rank = victim["spec"]["nodeName"], pod_rank(victim)
        stopped, failed = time.monotonic(), datetime.now(UTC)
        subprocess.run([str(CLUSTER / "real-nodes"), "stop", str(real_cluster.state), node], check=True)
        # Waited for at most half of Kubernetes' own eviction timeout: far sooner than eviction.
        restarted = job.wait(
            lambda current: (current.get("status") or {}).get("restarts") == 1,
            "the gang restart, within half the eviction timeout",
            timeout=EVICTION_SECONDS / 2,
        )
        print(f"dead node {node}: gang restarted after {time.monotonic() - stopped:.0f} s")
        assert restarted["status"]["lastRestart"]["reason"] == "NodeNotReady", restarted["status"]
        messages = job.warnings("NodeNotReady")
        assert any(f"rank {rank} (pod {victim['metadata']['name']})" in m and node in m for m in messages), messages
        final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
        assert phase(final) == "Succeeded" and final["status"]["workloadGeneration"] == 2, job.describe(final)
        last_rank0, _ = check_joined(job, 2)
        assert node not in {p["spec"]["nodeName"] for p in job.pods(2)}
        assert resumed_at(last_rank0) >= 10 and last_rank0[-1] == {"event": "done", "step": job.steps}
        pods = job.pods(2)
        workload = json.loads(real_cluster.kubectl("get", "job", f"{NAME}-g2", "-n", job.namespace, "-o", "json"))
        logs = [
            real_cluster.kubectl("logs", "--timestamps", "-n", job.namespace, p["metadata"]["name"], "-c", "trainer")
            for p in pods
        ]
        print(f"recovery from a dead node:\n{table(breakdown(failed, final['status'], workload, pods, logs))}")
    finally:
        job.delete()
