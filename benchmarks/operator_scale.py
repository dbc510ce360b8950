"""The operator at scale on a simulated cluster: N concurrent jobs of P pods each.

    python benchmarks/operator_scale.py [--nodes 512] [--jobs 50] [--pods 8] [--kubeconfig PATH]

Starts a private control plane with --nodes simulated 8-GPU nodes (hack/cluster/up; or uses a
running cluster given by --kubeconfig), installs the CRD, runs `longctx operator --all-namespaces`
as a real process, warms it up with one job, then applies --jobs LongContextJobs at once (builtin
admission, pods kept Running) and prints:
- p50/p95/max seconds from the apply to all of a job's pods Running (polled every 0.25 s);
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
import statistics
import subprocess
import sys
import tempfile
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
        self.env = os.environ | {"KUBECONFIG": str(kubeconfig), "PATH": cluster_path() + os.pathsep + os.environ["PATH"]}
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, input: str | None = None) -> str:
        return subprocess.run(["kubectl", *args], input=input, env=self.env, capture_output=True, text=True,
                              check=True).stdout


def job(name: str, pods: int) -> dict:
    return {"apiVersion": "longctx.io/v1alpha1", "kind": "LongContextJob",
            "metadata": {"name": name, "annotations": {
                "longctx.io/pod-annotations": json.dumps({"longctx.io/keep-running": "true"})}},
            "spec": {"model": {"preset": "tiny"}, "sequenceLength": 4096, "steps": 10,
                     "resources": {"nodes": pods, "gpusPerNode": 8, "gpuType": "h100-80gb"}}}


def operator_metrics(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        lines = r.read().decode().splitlines()
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith("longctx_operator_")}


def api_requests(metrics: dict[str, float]) -> float:
    return sum(v for k, v in metrics.items() if k.startswith("longctx_operator_api_requests_total"))


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def running_jobs(cluster: Cluster, namespace: str, pods: int) -> set[str]:
    """Jobs whose `pods` pods are all Running."""
    items = json.loads(cluster.kubectl("get", "pods", "-n", namespace, "-o", "json"))["items"]
    counts: dict[str, int] = {}
    for p in items:
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp"):
            name = p["metadata"]["labels"].get("longctx.io/job-name")
            counts[name] = counts.get(name, 0) + 1
    return {name for name, n in counts.items() if n >= pods}


def run_batch(cluster: Cluster, namespace: str, names: list[str], pods: int, timeout: float) -> dict[str, float]:
    docs = "\n---\n".join(json.dumps(job(n, pods)) for n in names)
    t0 = time.monotonic()
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=docs)
    done: dict[str, float] = {}
    while len(done) < len(names):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"only {len(done)} of {len(names)} jobs Running after {timeout}s")
        now = time.monotonic()
        for name in running_jobs(cluster, namespace, pods) - done.keys():
            done[name] = now - t0
        time.sleep(0.25)
    return done


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
        subprocess.run([str(SCRIPTS / "up"), "--nodes", str(args.nodes)], check=True, stdout=subprocess.DEVNULL,
                       env=os.environ | {"LONGCTX_CLUSTER_DIR": str(state)})
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
        log = open(Path(tempfile.gettempdir()) / f"longctx-operator-scale-{os.getpid()}.log", "wb")
        operator = subprocess.Popen(
            [sys.executable, "-m", "longctx_operator.cli", "operator", "--all-namespaces", "--metrics-port", str(port),
             "--liveness-port", "0"], env=cluster.env, stdout=log, stderr=subprocess.STDOUT)
        warm = run_batch(cluster, namespace, ["warmup"], args.pods, args.timeout)
        print(f"warm-up job: all {args.pods} pods Running after {warm['warmup']:.2f}s", flush=True)
        before = api_requests(operator_metrics(port))
        names = [f"scale-{i:03d}" for i in range(args.jobs)]
        latencies = run_batch(cluster, namespace, names, args.pods, args.timeout)
        time.sleep(2)  # let status updates after Running land before counting
        requests = api_requests(operator_metrics(port)) - before
        values = list(latencies.values())
        print(f"{args.jobs} concurrent jobs x {args.pods} pods on {args.nodes} nodes:")
        print(f"  apply -> all pods Running: p50 {percentile(values, 0.5):.2f}s  p95 {percentile(values, 0.95):.2f}s  "
              f"max {max(values):.2f}s  mean {statistics.mean(values):.2f}s")
        print(f"  operator API requests per job: {requests / args.jobs:.1f}")
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
