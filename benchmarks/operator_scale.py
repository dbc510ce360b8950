"""The operator at scale on a simulated cluster: N concurrent jobs of P pods each.

    python benchmarks/operator_scale.py [--nodes 512] [--jobs 50] [--pods 8] [--kubeconfig PATH]

Starts a private control plane with --nodes simulated 8-GPU nodes (hack/cluster/up; or uses a
running cluster given by --kubeconfig), installs the CRD, runs `longctx operator --all-namespaces`
as a real process, warms it up with one job, then applies --jobs LongContextJobs at once (builtin
admission, pods kept Running) and prints:
- p50/p95/max seconds from the apply to all of a job's pods Running (watched), with the stages on
  the way (the operator created the Job, the Job controller created the pods, the scheduler bound them);
- Kubernetes API requests per job made by the operator's client (longctx_operator_api_requests_total;
  kopf's few watch streams are shared by all jobs and not counted);
- the operator's peak resident memory (VmHWM).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "hack" / "cluster"
CRD = REPO / "crds" / "longctx.io_longcontextjobs.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_path() -> str:
    return subprocess.run([str(SCRIPTS / "path")], capture_output=True, text=True, check=True).stdout.strip()


class Cluster:
    def __init__(self, kubeconfig: Path):
        self.env = os.environ | {
            "KUBECONFIG": str(kubeconfig),
            "PATH": cluster_path() + os.pathsep + os.environ["PATH"],
        }
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return subprocess.run(
            ["kubectl", *args], input=input, env=self.env, capture_output=True, text=True, check=True
        ).stdout


def job(name: str, pods: int) -> dict:
    return {
        "apiVersion": "longctx.io/v1alpha1",
        "kind": "LongContextJob",
        "metadata": {
            "name": name,
            "annotations": {"longctx.io/pod-annotations": json.dumps({"longctx.io/keep-running": "true"})},
        },
        "spec": {
            "model": {"preset": "tiny"},
            "sequenceLength": 4096,
            "steps": 10,
            "resources": {"nodes": pods, "gpusPerNode": 8, "gpuType": "h100-80gb"},
        },
    }


def operator_metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("longctx_operator_")
    }


def api_requests(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("longctx_operator_api_requests_total"))


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


class Timeline:
    """Watches the namespace's Jobs and pods (one stream each, in threads) and records, per
    LongContextJob, when its Job appeared and when its pods were all created, bound and Running."""

    STAGES = ("applied", "job", "created", "scheduled", "running")

    def __init__(self, kubeconfig: Path, namespace: str, pods: int):
        import kubernetes

        self.api = kubernetes.config.new_client_from_config(str(kubeconfig))
        self.namespace, self.pods = namespace, pods
        self.t0: dict[str, float] = {}
        self.times: dict[str, dict[str, float]] = {}
        self.pod_state: dict[str, dict[str, tuple[bool, bool]]] = {}
        self.lock = threading.Lock()
        for target in (self._watch_longcontextjobs, self._watch_jobs, self._watch_pods):
            threading.Thread(target=self._quietly, args=(target,), daemon=True).start()

    @staticmethod
    def _quietly(watch) -> None:
        try:
            watch()
        except Exception:  # noqa: BLE001 - the stream ends when the cluster stops
            pass

    def _mark(self, job: str, stage: str) -> None:
        self.times.setdefault(job, {}).setdefault(stage, time.monotonic())

    def _watch_longcontextjobs(self) -> None:
        import kubernetes

        custom = kubernetes.client.CustomObjectsApi(self.api)
        for event in kubernetes.watch.Watch().stream(
            custom.list_namespaced_custom_object, "longctx.io", "v1alpha1", self.namespace, "longcontextjobs"
        ):
            with self.lock:
                self._mark(event["object"]["metadata"]["name"], "applied")

    def _watch_jobs(self) -> None:
        import kubernetes

        batch = kubernetes.client.BatchV1Api(self.api)
        for event in kubernetes.watch.Watch().stream(batch.list_namespaced_job, self.namespace):
            labels = event["object"].metadata.labels or {}
            if "longctx.io/job-name" in labels:
                with self.lock:
                    self._mark(labels["longctx.io/job-name"], "job")

    def _watch_pods(self) -> None:
        import kubernetes

        core = kubernetes.client.CoreV1Api(self.api)
        for event in kubernetes.watch.Watch().stream(core.list_namespaced_pod, self.namespace):
            pod = event["object"]
            job = (pod.metadata.labels or {}).get("longctx.io/job-name")
            if not job or event["type"] == "DELETED":
                continue
            with self.lock:
                states = self.pod_state.setdefault(job, {})
                states[pod.metadata.name] = (bool(pod.spec.node_name), pod.status.phase == "Running")
                if len(states) >= self.pods:
                    self._mark(job, "created")
                    if all(bound for bound, _ in states.values()):
                        self._mark(job, "scheduled")
                    if sum(running for _, running in states.values()) >= self.pods:
                        self._mark(job, "running")

    def apply(self, cluster: Cluster, names: list[str], timeout: float) -> dict[str, dict[str, float]]:
        """Creates the jobs at once (kubectl create: one request each); seconds from each job's
        creation (its ADDED event) to each stage."""
        docs = "\n---\n".join(json.dumps(job(n, self.pods)) for n in names)
        t0 = time.monotonic()
        cluster.kubectl("create", "-n", self.namespace, "-f", "-", input=docs)
        self.apply_seconds = time.monotonic() - t0
        while True:
            with self.lock:
                done = [n for n in names if "running" in self.times.get(n, {})]
            if len(done) == len(names):
                break
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"only {len(done)} of {len(names)} jobs Running after {timeout}s")
            time.sleep(0.1)
        with self.lock:
            return {
                n: {
                    stage: self.times[n][stage] - self.times[n]["applied"]
                    for stage in self.STAGES
                    if stage in self.times[n]
                }
                for n in names
            }


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--kubeconfig", type=Path, help="use this running cluster instead of starting one")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()

    state = None
    if args.kubeconfig:
        kubeconfig = args.kubeconfig
    else:
        state = Path(tempfile.mkdtemp(prefix="longctx-scale-"))
        t = time.monotonic()
        subprocess.run(
            [str(SCRIPTS / "up"), "--nodes", str(args.nodes)],
            check=True,
            stdout=subprocess.DEVNULL,
            env=os.environ | {"LONGCTX_CLUSTER_DIR": str(state)},
        )
        print(f"cluster with {args.nodes} nodes up in {time.monotonic() - t:.1f}s", flush=True)
        kubeconfig = state / "kubeconfig"
    cluster = Cluster(kubeconfig)
    operator = None
    namespace = f"scale-{os.getpid()}"
    try:
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
        cluster.kubectl("wait", "--for=condition=Established", "crd/longcontextjobs.longctx.io", "--timeout=60s")
        cluster.kubectl("create", "namespace", namespace)
        while True:
            try:
                cluster.kubectl("get", "serviceaccount", "default", "-n", namespace)
                break
            except subprocess.CalledProcessError:
                time.sleep(0.5)
        port = free_port()
        scratch = Path(tempfile.gettempdir())
        log = open(scratch / f"longctx-operator-scale-{os.getpid()}.log", "wb")
        config = scratch / f"longctx-operator-scale-{os.getpid()}.yaml"
        # KWOK's stage annotation (longctx.io/keep-running) must reach the pods.
        config.write_text(json.dumps({"allowedPodAnnotations": ["longctx.io/*"]}))
        operator = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "longctx_operator.cli",
                "operator",
                "--all-namespaces",
                "--config",
                str(config),
                "--metrics-port",
                str(port),
                "--health-port",
                "0",
            ],
            env=cluster.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        timeline = Timeline(kubeconfig, namespace, args.pods)
        warm = timeline.apply(cluster, ["warmup"], args.timeout)["warmup"]
        print(
            f"warm-up job (operator just started): all {args.pods} pods Running after {warm['running']:.2f}s",
            flush=True,
        )
        before = api_requests(operator_metrics(port))
        cpu_before = cpu_seconds(operator.pid)
        names = [f"scale-{i:03d}" for i in range(args.jobs)]
        stages = timeline.apply(cluster, names, args.timeout)
        time.sleep(2)  # let status updates after Running land before counting
        requests = api_requests(operator_metrics(port)) - before
        cpu = cpu_seconds(operator.pid) - cpu_before
        reconciles = operator_metrics(port)
        print(
            f"{args.jobs} concurrent jobs x {args.pods} pods on {args.nodes} nodes (kubectl created them in "
            f"{timeline.apply_seconds:.1f}s), seconds from each job's creation:"
        )
        for stage, label in (
            ("job", "Job created by the operator"),
            ("created", "all pods created"),
            ("scheduled", "all pods bound"),
            ("running", "all pods Running"),
        ):
            values = [s[stage] for s in stages.values() if stage in s]
            print(
                f"  {label:28s} p50 {percentile(values, 0.5):6.2f}  p95 {percentile(values, 0.95):6.2f}  "
                f"max {max(values):6.2f}"
            )
        print(f"  operator API requests per job: {requests / args.jobs:.1f}")
        count = sum(v for k, v in reconciles.items() if k.startswith("longctx_operator_reconciles_total"))
        mean = reconciles["longctx_operator_reconcile_duration_seconds_sum"] / max(
            1, reconciles["longctx_operator_reconcile_duration_seconds_count"]
        )
        print(
            f"  operator: {count:.0f} reconciliations in all (mean {mean * 1000:.0f} ms), "
            f"{cpu:.1f} CPU seconds for the batch"
        )
        print(f"  operator peak RSS: {peak_rss_mib(operator.pid):.0f} MiB")
        return 0
    finally:
        if operator is not None:
            operator.terminate()
            operator.wait(timeout=30)
        try:
            cluster.kubectl("delete", "namespace", namespace, "--wait=false")
        except subprocess.CalledProcessError:
            pass
        if state is not None:
            subprocess.run([str(SCRIPTS / "down")], env=os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}, check=False)
            shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
