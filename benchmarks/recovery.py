"""Time to recover, on the local cluster with real nodes: the quickstart gang (two trainer pods on
two real nodes, checkpoints on a volume both reach) trains, then one of two faults, each in a job
of its own, and the table is the time from the fault to the first training step after it, broken
down by tests/support/recovery.py:

- kill: past a checkpoint, rank 1's trainer is killed (SIGINT through the pod's launcher: no save,
  a failure) and the operator restarts the whole gang: detect, delete, schedule, start,
  rendezvous, restore, compile, first step (generation 2's);
- preempt: rank 1's pod is deleted (graceful: SIGTERM, as a drain or a preemption), every rank
  saves the step they agree on and the same Job replaces the pods: save, stop, schedule, start,
  rendezvous, restore, compile, first step (the replaced pods');
- inplace: with `restartPolicy.inPlace`, rank 1's trainer crashes past a checkpoint
  (LONGCTX_FAULT_EXIT_AT_STEP) and the launchers restart the trainers inside the same pods: agree,
  stop, rendezvous, restore, compile, first step (the trainers' second epoch).

    python benchmarks/recovery.py [--faults kill,preempt,inplace] [--steps 60] [--trace]

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
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))  # the real-node tests' cluster and job helpers
from e2e.conftest import CLUSTER, RealCluster  # noqa: E402
from e2e.test_real_nodes import NAME, Job, checkpointing, phase, saving_on_preemption  # noqa: E402

from longctx_trainer.contract.podenv import FAULT_EXIT_AT_STEP  # noqa: E402
from longctx_trainer.faults import FAULT_EXIT_CODE  # noqa: E402
from support.cluster import Kubectl  # noqa: E402
from support.recovery import breakdown, in_place_breakdown, preemption_breakdown, table  # noqa: E402

CHECKPOINT_INTERVAL = 5
WATCHED = (
    "{.type} {.object.metadata.name} del={.object.metadata.deletionTimestamp}"
    " grace={.object.metadata.deletionGracePeriodSeconds} phase={.object.status.phase}"
    " finished={.object.status.containerStatuses[*].state.terminated.finishedAt}"
    ' finalizers={.object.metadata.finalizers}{"\\n"}'
)
"""What the trace prints of each watch event of a job's pods and Jobs."""


class Trace:
    """`kubectl get -w` of the job's pods and Jobs, each event stamped when it arrives: explains the
    delete stage (when the old pods were asked to go, with what grace, when their containers
    ended, when they and the old Job were gone)."""

    def __init__(self, cluster: RealCluster, namespace: str):
        self.began = datetime.now(UTC)
        self.lines: list[tuple[float, str]] = []
        self._watches = [
            subprocess.Popen(
                [
                    "kubectl",
                    "get",
                    kind,
                    "-n",
                    namespace,
                    "-w",
                    "--output-watch-events",
                    "-o",
                    f"jsonpath={WATCHED}",
                ],
                env=Kubectl(cluster.kubeconfig).env,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
            )
            for kind in ("pods", "jobs")
        ]
        self._readers = [threading.Thread(target=self._read, args=(w,), daemon=True) for w in self._watches]
        for reader in self._readers:
            reader.start()

    def _read(self, watch: subprocess.Popen) -> None:
        for line in watch.stdout:
            seconds = (datetime.now(UTC) - self.began).total_seconds()
            self.lines.append((seconds, line.rstrip()))

    def stop(self) -> list[str]:
        for watch in self._watches:
            watch.terminate()
        for reader in self._readers:
            reader.join(timeout=5)
        return [f"+{seconds:6.1f} s  {line}" for seconds, line in sorted(self.lines)]


def progress(job: dict) -> dict:
    return (job.get("status") or {}).get("progress") or {}


def logs_of(cluster: RealCluster, job: Job, pods: list[dict]) -> list[str]:
    return [
        cluster.kubectl("logs", "--timestamps", "-n", job.namespace, p["metadata"]["name"], "-c", "trainer")
        for p in pods
    ]


def finish(job: Job) -> dict:
    """The job once it has Succeeded (anything else ends the benchmark with its description)."""
    final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
    if phase(final) != "Succeeded":
        raise SystemExit(f"the job did not succeed:\n{job.describe(final)}")
    return final


def measure_kill(cluster: RealCluster, steps: int, trace: list[str]) -> dict[str, float]:
    job = Job(cluster, checkpointing(steps, CHECKPOINT_INTERVAL, restartPolicy={"maxRestarts": 1, "backoffSeconds": 1}))
    try:
        job.wait(lambda current: progress(current).get("lastCheckpointStep"), "generation 1 to pass a checkpoint")
        victim = job.pods(1)[1]["metadata"]["name"]
        watching = Trace(cluster, job.namespace)
        time.sleep(1)  # the watches' initial listings arrive before the kill
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
        trace.append(f"kill at +{(failed - watching.began).total_seconds():.1f} s")
        trace.extend(watching.stop())
        final = finish(job)
        pods = job.pods(2)
        workload = json.loads(cluster.kubectl("get", "job", f"{NAME}-g2", "-n", job.namespace, "-o", "json"))
        return breakdown(failed, final["status"], workload, pods, logs_of(cluster, job, pods))
    finally:
        job.delete()


def measure_preemption(cluster: RealCluster, steps: int, trace: list[str]) -> dict[str, float]:
    job = Job(cluster, saving_on_preemption(steps, restartPolicy={"maxRestarts": 1, "backoffSeconds": 1}))
    try:
        job.wait(lambda current: progress(current).get("step", 0) >= 3, "step 3")
        rank0, rank1 = job.pods(1)
        watching = Trace(cluster, job.namespace)
        time.sleep(1)  # the watches' initial listings arrive before the delete
        preempted = datetime.now(UTC)
        cluster.kubectl("delete", "pod", "-n", job.namespace, rank1["metadata"]["name"], "--wait=false")
        job.wait(
            lambda current: (
                progress(current).get("resumedFromStep") is not None
                and progress(current).get("step", 0) > progress(current)["resumedFromStep"]
            ),
            "the replaced pods' first step",
        )
        trace.append(f"delete at +{(preempted - watching.began).total_seconds():.1f} s")
        trace.extend(watching.stop())
        finish(job)
        old = {rank0["metadata"]["uid"], rank1["metadata"]["uid"]}
        listed = job.pods(1)
        pods = [p for p in listed if p["metadata"]["uid"] not in old]
        (ended,) = [p for p in listed if p["metadata"]["uid"] == rank0["metadata"]["uid"]]
        (old_log,) = logs_of(cluster, job, [ended])
        return preemption_breakdown(preempted, ended, old_log, pods, logs_of(cluster, job, pods))
    finally:
        job.delete()


def measure_in_place(cluster: RealCluster, steps: int, trace: list[str]) -> dict[str, float]:
    crash_after = CHECKPOINT_INTERVAL + 2
    job = Job(
        cluster,
        checkpointing(
            steps,
            CHECKPOINT_INTERVAL,
            restartPolicy={"inPlace": True, "maxRestarts": 0},
            env=[{"name": FAULT_EXIT_AT_STEP, "value": f"1:{crash_after}"}],
        ),
    )
    try:
        watching = Trace(cluster, job.namespace)
        job.wait(
            lambda current: (
                (progress(current).get("resumedFromStep") or 0) > 0
                and progress(current).get("step", 0) > progress(current)["resumedFromStep"]
            ),
            "the first step after the in-place restart",
        )
        trace.extend(watching.stop())
        finish(job)
        pods = job.pods(1)
        return in_place_breakdown(f"exiting {FAULT_EXIT_CODE} after step {crash_after}", logs_of(cluster, job, pods))
    finally:
        job.delete()


FAULTS = {
    "kill": ("kill of rank 1's trainer -> generation 2's first step", measure_kill),
    "preempt": ("graceful delete of rank 1's pod -> the replaced pods' first step", measure_preemption),
    "inplace": ("crash of rank 1's trainer, restarted in place -> the first step after it", measure_in_place),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", default="kill,preempt,inplace", help=f"comma list of {', '.join(FAULTS)}")
    parser.add_argument("--steps", type=int, default=60, help="steps of each job (it must outlast the restart)")
    parser.add_argument("--trace", action="store_true", help="also print the pods' and Jobs' watch events")
    args = parser.parse_args()
    faults = args.faults.split(",")
    if unknown := sorted(set(faults) - set(FAULTS)):
        parser.error(f"unknown fault {', '.join(unknown)}: choose from {', '.join(FAULTS)}")
    results: list[tuple[str, dict[str, float], list[str], float]] = []
    with tempfile.TemporaryDirectory(prefix="longctx-bench-recovery-") as scratch:
        state = Path(scratch) / "cluster"
        env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}
        try:
            up = [str(CLUSTER / "up"), "--nodes", "0", "--real-nodes", "2"]
            subprocess.run(up, env=env, check=True, stdout=subprocess.DEVNULL)
            subprocess.run([str(CLUSTER / "install-operator")], env=env, check=True, stdout=subprocess.DEVNULL)
            cluster = RealCluster(state, state / "kubeconfig")
            for fault in faults:
                trace: list[str] = []
                started = time.monotonic()
                seconds = FAULTS[fault][1](cluster, args.steps, trace)
                results.append((fault, seconds, trace, time.monotonic() - started))
        finally:
            subprocess.run([str(CLUSTER / "down")], env=env, check=False)
    for fault, seconds, trace, ran in results:
        print(f"{FAULTS[fault][0]} (job of {args.steps} steps):")
        print(table(seconds))
        print(f"(the job ran {ran:.0f} s in all)\n")
        if args.trace:
            print("the job's pods and Jobs from the fault to the first step after it (watch events):")
            print("\n".join(trace) + "\n")


if __name__ == "__main__":
    main()
