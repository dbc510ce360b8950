"""Time to recover from a killed rank, on the local cluster with real nodes: the quickstart gang
(two trainer pods on two real nodes, checkpoints on a volume both reach) trains past a checkpoint,
rank 1's trainer is killed (SIGINT through the pod's launcher: no save, a failure), the operator
restarts the whole gang, and the table is the time from the kill to generation 2's first training
step, broken down by tests/support/recovery.py (detect, delete, schedule, start, rendezvous,
restore, compile).

    python benchmarks/recovery.py [--steps 60]

Starts its own cluster (hack/cluster/up --real-nodes 2, hack/cluster/install-operator: the images
built here, a cache hit after the first build) and tears it down. Run it only under the e2e lock
(`flock /tmp/longctx-e2e.lock ...`), like the real-node tests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the real-node tests' cluster and job helpers
from e2e.conftest import CLUSTER, RealCluster  # noqa: E402
from e2e.test_real_nodes import NAME, Job, phase  # noqa: E402

from support.recovery import breakdown, table  # noqa: E402

CHECKPOINT_INTERVAL = 5


def progress(job: dict) -> dict:
    return (job.get("status") or {}).get("progress") or {}


def measure(cluster: RealCluster, steps: int) -> dict[str, float]:
    job = Job(
        cluster,
        {
            "steps": steps,
            "sequenceLength": 512,
            "globalBatchTokens": 1024,
            "checkpoint": {
                "path": "/checkpoints",
                "persistentVolumeClaim": "checkpoints",
                "intervalSteps": CHECKPOINT_INTERVAL,
            },
            "restartPolicy": {"maxRestarts": 1, "backoffSeconds": 1},
        },
    )
    try:
        job.wait(lambda current: progress(current).get("lastCheckpointStep"), "generation 1 to pass a checkpoint")
        victim = job.pods(1)[1]["metadata"]["name"]
        failed = datetime.now(UTC)
        # PID 1, the launcher, forwards SIGINT to the trainer, which ends at once: a failure.
        cluster.kubectl("exec", "-n", job.namespace, victim, "-c", "trainer", "--", "sh", "-c", "kill -INT 1")
        job.wait(
            lambda current: (
                (current.get("status") or {}).get("workloadGeneration") == 2
                and progress(current).get("step", 0) > (progress(current).get("resumedFromStep") or 0)
            ),
            "generation 2's first step",
        )
        final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
        if phase(final) != "Succeeded":
            raise SystemExit(f"the job did not succeed:\n{job.describe(final)}")
        pods = job.pods(2)
        workload = json.loads(cluster.kubectl("get", "job", f"{NAME}-g2", "-n", job.namespace, "-o", "json"))
        logs = [
            cluster.kubectl("logs", "--timestamps", "-n", job.namespace, p["metadata"]["name"], "-c", "trainer")
            for p in pods
        ]
        return breakdown(failed, final["status"], workload, pods, logs)
    finally:
        job.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="steps of the job (it must outlast the restart)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="longctx-bench-recovery-") as scratch:
        state = Path(scratch) / "cluster"
        env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}
        try:
            up = [str(CLUSTER / "up"), "--nodes", "0", "--real-nodes", "2"]
            subprocess.run(up, env=env, check=True, stdout=subprocess.DEVNULL)
            subprocess.run([str(CLUSTER / "install-operator")], env=env, check=True, stdout=subprocess.DEVNULL)
            started = time.monotonic()
            seconds = measure(RealCluster(state, state / "kubeconfig"), args.steps)
        finally:
            subprocess.run([str(CLUSTER / "down")], env=env, check=False)
    print(f"kill of rank 1's trainer -> generation 2's first step (job of {args.steps} steps):")
    print(table(seconds))
    print(f"(the job ran {time.monotonic() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
