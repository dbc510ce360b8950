"""The operator at scale on a simulated cluster, against two baselines in the same run.

    python benchmarks/operator_scale.py [--nodes 512] [--jobs 50] [--pods 8] [--systems raw,jobset,longctx]
        [--scenarios quiet,busy] [--rounds 1] [--busy-nodes 2000] [--busy-pods 20000] [--churn 20]
        [--controller-manager-arg=--concurrent-job-syncs=50 ...] [--operator-setting workers=32 ...]

Starts a private control plane with --nodes simulated 8-GPU nodes (hack/cluster/up, with an audit log
of every request) and runs the same gangs of --pods pods three ways, one after the other, each in
its own namespace with its controller started just for it:
- raw: the objects longctx renders (operator/render: headless Service, ConfigMap, Indexed Job) created
  directly with kubectl, no controller: the control plane's own floor;
- jobset: the same ConfigMap and the same Job spec as a JobSet, run by the JobSet controller
  (sigs.k8s.io/jobset, built from Go modules, webhooks on: benchmarks/jobset_controller.py);
- longctx: LongContextJobs and `longctx operator --all-namespaces` as a real process.
Each system gets one warm-up gang, then, 5 s later (past the age of the operator's list of other
pods, so the batch lists them again), --jobs gangs created at once (pods kept Running), then its
controller is stopped and its gangs deleted before the next. It prints p50/p95/max seconds from each
gang's creation to all its pods Running (with the stages on the way), the ratios of p50 and p95
against raw and JobSet, API requests per gang by client and, for the controllers, by request (the
API server's audit log, by user agent, between the first create and the last Running, the operator's
cluster-wide lists included) and the time the controllers' writes took in the API server (audit
log: received to completed), the controllers' CPU seconds for the batch and peak resident memory
(VmHWM), the control plane's CPU seconds for the batch by process (kube-apiserver, etcd,
kube-controller-manager, kube-scheduler, KWOK), and longctx's reconcile latency (first watch event to decision, its
longctx_operator_reconcile_latency_seconds histogram) and duration (a decision and its writes).

Those are the "quiet" scenario; --rounds N runs it N times on the same cluster, each round in
another order (rotated), and ends with each round's p95 ratios against issue #31's goals and how
many rounds met them: one run's ratio varies from run to run as much as its gap to the goal.

The "busy" scenario starts a second cluster of --busy-nodes nodes and runs longctx's gangs there
twice, first on the idle cluster, then while --busy-pods unrelated pods churn (the benchmark keeps
that many and replaces --churn of them per second, created and deleted), then JobSet's under the
same churn: the operator's cost must not grow with pods that are not its own.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # jobset_controller's support.cluster
import jobset_controller
from pydantic import ValidationError

from longctx_operator import metrics
from longctx_operator.annotations import pod_annotations
from longctx_operator.api.crd import CRD_NAME
from longctx_operator.api.validate import parse_job
from longctx_operator.config import OperatorConfig
from longctx_operator.names import JOB_NAME_LABEL
from longctx_operator.occupancy import MAX_AGE_SECONDS
from longctx_operator.reconciler import add_pod_annotations
from longctx_operator.render import render_workload
from longctx_operator.resolve import resolve_layout
from support.cluster import Kubectl
from support.jobs import job_manifest
from support.ports import free_port
from support.waiting import poll_until

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "hack" / "cluster"
CRD = REPO / "crds" / "longctx.io_longcontextjobs.yaml"
SYSTEMS = ("raw", "jobset", "longctx")
OPERATOR_CONFIG = {"allowedPodAnnotations": ["longctx.io/*"]}  # KWOK's stage annotation must reach the pods
# Every request but the nodes' lease renewals, with its user agent, once it completed.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived", "ResponseStarted"],
    "rules": [
        {"level": "None", "resources": [{"group": "coordination.k8s.io", "resources": ["leases"]}]},
        {"level": "Metadata"},
    ],
}


def manifest(name: str, namespace: str, pods: int) -> dict:
    keep = {"longctx.io/pod-annotations": json.dumps({"longctx.io/keep-running": "true"})}
    return job_manifest(
        name, namespace=namespace, resources=(pods, 8, "h100-80gb"), metadata={"annotations": keep}, steps=10
    )


def rendered(name: str, namespace: str, pods: int) -> list[dict]:
    """Service, ConfigMap and generation 1's Job exactly as the operator creates them (less the
    owner references): its renderer, its configuration, its pod annotations."""
    job = parse_job(manifest(name, namespace, pods))
    config = OperatorConfig.model_validate(OPERATOR_CONFIG)
    layout, _ = resolve_layout(job.spec)
    workload = render_workload(job, layout, 1, config)
    add_pod_annotations(workload.job, pod_annotations(job.metadata.annotations, config).values)
    return workload.objects


def gang_objects(system: str, name: str, namespace: str, pods: int) -> list[dict]:
    """What a user applies for one gang with each system."""
    if system == "longctx":
        return [manifest(name, namespace, pods)]
    service, config_map, job = rendered(name, namespace, pods)
    if system == "raw":
        return [service, config_map, job]
    return [config_map, jobset_controller.jobset(job, name)]


# What each system's user applies first (the gang's creation); a raw gang's Service.
ROOTS = {
    "raw": ("", "v1", "services"),
    "jobset": (jobset_controller.GROUP, jobset_controller.VERSION, "jobsets"),
    "longctx": ("longctx.io", "v1alpha1", "longcontextjobs"),
}


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def control_plane_pids(cluster: Kubectl) -> dict[str, int]:
    """The running processes of the cluster (hack/lib.sh `start` writes STATE/pids/NAME.pid):
    kube-apiserver, etcd, kube-controller-manager, kube-scheduler, kwok."""
    pids = {path.stem: int(path.read_text()) for path in sorted((cluster.kubeconfig.parent / "pids").glob("*.pid"))}
    return {name: pid for name, pid in pids.items() if Path(f"/proc/{pid}/stat").exists()}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM")


def client(user_agent: str) -> str:
    """The program that sent a request: the user agent's first word (kube-controller-manager's
    controllers are told apart by the suffix it adds), kopf's watch streams counted with longctx."""
    program = user_agent.split("/", 1)[0]
    if program == "kube-controller-manager":
        return "kcm/" + user_agent.rsplit("/", 1)[-1]
    return {"kopf": "longctx-operator", APPLIER: "apply"}.get(program, program)


CONTROLLERS = ("longctx-operator", "jobset")
WARMUP = "warmup"
"""The name of each system's warm-up gang, whose objects' requests are not counted."""


def audit_requests(path: Path, namespace: str, since: float, until: float) -> dict[tuple[str, str], list[float]]:
    """Requests received between since and until, by client and request ("patch
    longcontextjobs/status"), each as its seconds from received to completed: those for objects in
    the namespace but the warm-up gang's, and the controllers' cluster-wide ones (the operator's
    lists of other pods, its node watch)."""
    requests: dict[tuple[str, str], list[float]] = {}
    with path.open() as log:
        for line in log:
            if '"ResponseComplete"' not in line:
                continue
            event = json.loads(line)
            who = client(event.get("userAgent", "?"))
            ref = event.get("objectRef", {})
            where = ref.get("namespace")
            if where != namespace and (where or who not in CONTROLLERS):
                continue
            if (ref.get("name") or "").startswith(WARMUP):  # its late writes (Events, status) are not the batch's
                continue
            received = datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            if since <= received <= until:
                resource = "/".join(filter(None, (ref.get("resource"), ref.get("subresource"))))
                completed = datetime.fromisoformat(event["stageTimestamp"]).timestamp()
                what = f"{event.get('verb')} {resource or event.get('requestURI', '?')}"
                requests.setdefault((who, what), []).append(completed - received)
    return requests


# Writes whose time in the API server the report prints: the controllers' own, and the Job
# controller's pod creates beside them (the control plane's own writes under the same load).
TIMED_WRITES = ("create", "patch", "update", "delete")
REFERENCE_WRITES = (("kcm/job-controller", "create pods"),)


class Timeline:
    """Watches one namespace's gang roots, Jobs and pods (one stream each, in threads) and records,
    per gang, when it was created, its Job appeared and its pods were all created, bound and Running."""

    STAGES = ("applied", "job", "created", "scheduled", "running")

    def __init__(self, kubeconfig: Path, namespace: str, root: tuple[str, str, str], pods: int):
        import kubernetes

        self.api = kubernetes.config.new_client_from_config(str(kubeconfig))
        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(kubeconfig), client_configuration=config)
        config.connection_pool_maxsize = APPLY_THREADS
        self.applier = kubernetes.client.ApiClient(config)
        self.applier.user_agent = APPLIER
        self.namespace, self.root, self.pods = namespace, root, pods
        self.times: dict[str, dict[str, float]] = {}
        self.pod_state: dict[str, dict[str, tuple[bool, bool]]] = {}
        self.lock = threading.Lock()
        for target in (self._watch_roots, self._watch_jobs, self._watch_pods):
            threading.Thread(target=self._quietly, args=(target,), daemon=True).start()

    @staticmethod
    def _quietly(watch) -> None:
        try:
            watch()
        except Exception:  # noqa: BLE001 - the stream ends when the cluster stops
            pass

    def _mark(self, job: str, stage: str) -> None:
        self.times.setdefault(job, {}).setdefault(stage, time.monotonic())

    def _watch_roots(self) -> None:
        import kubernetes

        group, version, plural = self.root
        custom = kubernetes.client.CustomObjectsApi(self.api)
        if group:
            stream = (custom.list_namespaced_custom_object, group, version, self.namespace, plural)
        else:
            stream = (kubernetes.client.CoreV1Api(self.api).list_namespaced_service, self.namespace)
        for event in kubernetes.watch.Watch().stream(*stream):
            obj = event["object"]
            meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata.to_dict()
            if group or JOB_NAME_LABEL in (meta.get("labels") or {}):
                with self.lock:
                    self._mark(meta["name"], "applied")

    def _watch_jobs(self) -> None:
        import kubernetes

        batch = kubernetes.client.BatchV1Api(self.api)
        for event in kubernetes.watch.Watch().stream(batch.list_namespaced_job, self.namespace):
            labels = event["object"].metadata.labels or {}
            if JOB_NAME_LABEL in labels:
                with self.lock:
                    self._mark(labels[JOB_NAME_LABEL], "job")

    def _watch_pods(self) -> None:
        import kubernetes

        core = kubernetes.client.CoreV1Api(self.api)
        for event in kubernetes.watch.Watch().stream(core.list_namespaced_pod, self.namespace):
            pod = event["object"]
            job = (pod.metadata.labels or {}).get(JOB_NAME_LABEL)
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

    def apply(self, objects: dict[str, list[dict]], timeout: float) -> dict[str, dict[str, float]]:
        """Creates all gangs at once (APPLY_THREADS at a time, each gang's objects in order, one
        request each); seconds from each gang's creation (its root's ADDED event) to each stage."""
        t0 = time.monotonic()
        with ThreadPoolExecutor(APPLY_THREADS) as pool:
            list(pool.map(lambda gang: [create(self.applier, o) for o in gang], objects.values()))
        self.apply_seconds = time.monotonic() - t0

        def all_running() -> bool:
            with self.lock:
                return all("running" in self.times.get(n, {}) for n in objects)

        poll_until(all_running, timeout - self.apply_seconds, interval=0.1, what=f"all {len(objects)} gangs Running")
        with self.lock:
            return {
                n: {s: self.times[n][s] - self.times[n]["applied"] for s in self.STAGES if s in self.times[n]}
                for n in objects
            }


APPLY_THREADS = 16
APPLIER = "longctx-bench-apply"  # the user agent of the requests that play the user


def create(api, obj: dict) -> None:
    """One create request for one object of the kinds the gangs are made of."""
    import kubernetes

    namespace, kind = obj["metadata"]["namespace"], obj["kind"]
    core, batch = kubernetes.client.CoreV1Api(api), kubernetes.client.BatchV1Api(api)
    quiet = {"_preload_content": False}
    if kind == "Service":
        core.create_namespaced_service(namespace, obj, **quiet)
    elif kind == "ConfigMap":
        core.create_namespaced_config_map(namespace, obj, **quiet)
    elif kind == "Job":
        batch.create_namespaced_job(namespace, obj, **quiet)
    else:
        group, version = obj["apiVersion"].split("/")
        plural = {"JobSet": "jobsets", "LongContextJob": "longcontextjobs"}[kind]
        kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
            group, version, namespace, plural, obj, **quiet
        )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Controller:
    """No controller (raw), the JobSet controller, or the longctx operator, as a process."""

    def __init__(self, system: str, cluster: Kubectl, scratch: Path, operator_settings: dict):
        self.system, self.cluster, self.scratch = system, cluster, scratch
        self.operator_settings = operator_settings
        self.process: subprocess.Popen | None = None
        self.jobset: jobset_controller.JobSetController | None = None
        self.metrics_port = free_port()

    def start(self) -> None:
        if self.system == "jobset":
            self.jobset = jobset_controller.JobSetController(self.cluster, self.scratch, free_port(), free_port())
            self.jobset.start()
            self.process = self.jobset.process
        elif self.system == "longctx":
            config = self.scratch / "longctx-operator.yaml"
            config.write_text(json.dumps(OPERATOR_CONFIG | self.operator_settings))
            self.process = subprocess.Popen(
                [sys.executable, "-m", "longctx_operator.cli", "operator", "--all-namespaces", "--config",
                 str(config), "--metrics-port", str(self.metrics_port), "--health-port", "0"],
                env=self.cluster.env,
                stdout=open(self.scratch / "longctx-operator.log", "wb"),
                stderr=subprocess.STDOUT,
            )  # fmt: skip

    def histograms(self) -> dict[str, dict[float, float]]:
        """longctx's reconcile histograms (RECONCILE_HISTOGRAMS): name -> upper bound -> cumulative count."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as r:
            lines = r.read().decode().splitlines()
        found: dict[str, dict[float, float]] = {}
        for name in RECONCILE_HISTOGRAMS:
            prefix = f"{name}_bucket{{le="
            found[name] = {
                float(line[len(prefix) + 1 :].split('"')[0]): float(line.rsplit(" ", 1)[1])
                for line in lines
                if line.startswith(prefix)
            }
        return found

    def stop(self) -> None:
        if self.jobset is not None:
            self.jobset.stop()
        elif self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)


def delete_gangs(cluster: Kubectl, namespace: str, timeout: float = 300) -> None:
    """Deletes a namespace's Jobs in the foreground (the Job controller drops its pod finalizers, which
    KWOK's pods would otherwise keep), waits for their pods to go, then deletes the namespace and
    waits for it to go: the next system's controller (longctx's watches every namespace) must not
    find this one's gangs and serve them again."""
    cluster("delete", "jobs", "--all", "-n", namespace, "--cascade=foreground", "--wait=false", timeout=None)
    poll_until(
        lambda: not cluster("get", "pods", "-n", namespace, "-o", "name").strip(),
        timeout,
        interval=1,
        what=f"the pods of {namespace} to go",
    )
    cluster("delete", "namespace", namespace, f"--timeout={timeout:.0f}s", timeout=None)


RECONCILE_HISTOGRAMS = {
    metrics.RECONCILE_LATENCY.describe()[0].name: "reconcile latency, event to decision",
    metrics.RECONCILE_DURATION.describe()[0].name: "reconcile duration, a decision and its writes",
}


def bucket_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound of the histogram bucket holding quantile q of the observations in between."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = counts[float("inf")]
    return next(le for le, n in counts.items() if n >= q * total) if total else float("nan")


def run_system(system: str, cluster: Kubectl, args, scratch: Path, audit: Path | None, label: str = "") -> dict:
    namespace = f"scale-{system}{label}-{os.getpid()}"
    cluster.create_namespace(namespace)
    controller = Controller(system, cluster, scratch, dict(args.operator_setting))
    controller.start()
    try:
        timeline = Timeline(cluster.kubeconfig, namespace, ROOTS[system], args.pods)
        timeline.apply({WARMUP: gang_objects(system, WARMUP, namespace, args.pods)}, args.timeout)
        print(f"{system}: warm-up gang Running", flush=True)
        # The warm-up's count listed the other pods; past their age limit the batch's first count
        # lists them again, so that list's cost falls in the batch as it would for any later burst.
        time.sleep(MAX_AGE_SECONDS)
        cpu_before = cpu_seconds(controller.process.pid) if controller.process else 0.0
        control_plane = control_plane_pids(cluster)
        control_plane_before = {name: cpu_seconds(pid) for name, pid in control_plane.items()}
        histograms_before = controller.histograms() if system == "longctx" else None
        names = [f"scale-{i:03d}" for i in range(args.jobs)]
        since = time.time()
        stages = timeline.apply({n: gang_objects(system, n, namespace, args.pods) for n in names}, args.timeout)
        time.sleep(2)  # let the status updates after Running land before counting
        until = time.time()
        result = {
            "stages": stages,
            "apply_seconds": timeline.apply_seconds,
            "batch_seconds": until - since,
            "control_plane_cpu": {n: cpu_seconds(pid) - control_plane_before[n] for n, pid in control_plane.items()},
        }
        if controller.process is not None:
            result["cpu"] = cpu_seconds(controller.process.pid) - cpu_before
            result["rss"] = peak_rss_mib(controller.process.pid)
        if histograms_before is not None:
            after = controller.histograms()
            result["histograms"] = {
                name: [bucket_quantile(histograms_before[name], after[name], q) for q in (0.5, 0.95)]
                for name in RECONCILE_HISTOGRAMS
            }
        if audit is not None:
            result["requests"] = audit_requests(audit, namespace, since, until)
        return result
    finally:
        controller.stop()
        delete_gangs(cluster, namespace)


STAGE_LABELS = {
    "job": "Job created",
    "created": "all pods created",
    "scheduled": "all pods bound",
    "running": "all pods Running",
}


UNRUN_NODE = "busy-nowhere"
"""The node the unrelated pods are bound to: a Node object that KWOK does not manage (no annotation)
and the scheduler may not use (unschedulable), so neither works on them (KWOK runs a few pods a
second on this machine: thousands of extra pods kept the gangs' pods from Running for minutes,
2026-11-26), while the API server still stores them, sends their events and lists them (what the
operator's cost could grow with). The Node must exist: the pod garbage collector deletes pods bound
to a missing node 40 s after it sees them (it had taken 3,000 to 6,000 of the 20,000 by the batch,
docs/operator.md, 2026-11-28). The node never reports Ready, so the pods tolerate every taint: the
node lifecycle controller's NoExecute taints would evict them after DefaultTolerationSeconds."""
UNRUN_NODE_MANIFEST = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": UNRUN_NODE},
    "spec": {"unschedulable": True},
}


class Churn:
    """Keeps `count` unrelated pods (no controller, no GPUs, bound to UNRUN_NODE) in their own
    namespace, and from start() replaces `rate` of them per second: the oldest deleted, a new one
    created, each one request."""

    def __init__(self, cluster: Kubectl, count: int, rate: float):
        import kubernetes

        config = kubernetes.client.Configuration()
        kubernetes.config.load_kube_config(str(cluster.kubeconfig), client_configuration=config)
        config.connection_pool_maxsize = APPLY_THREADS
        api = kubernetes.client.ApiClient(config)
        api.user_agent = "longctx-bench-churn"
        self.core = kubernetes.client.CoreV1Api(api)
        self.namespace = f"busy-{os.getpid()}"
        cluster("create", "namespace", self.namespace)
        cluster.apply(UNRUN_NODE_MANIFEST)
        self.count, self.rate, self.made = count, rate, 0
        self.alive: list[str] = []
        self.stopped = threading.Event()
        self.pool = ThreadPoolExecutor(APPLY_THREADS)

    def _create(self) -> None:
        name = f"busy-{self.made:06d}"
        self.made += 1
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "busy"}},
            "spec": {
                "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "10m"}}}],
                "nodeName": UNRUN_NODE,
                "tolerations": [{"operator": "Exists"}],
            },
        }
        self.alive.append(name)
        self.pool.submit(self.core.create_namespaced_pod, self.namespace, pod, _preload_content=False)

    def fill(self) -> None:
        t = time.monotonic()
        while self.made < self.count:
            self._create()
        self.pool.shutdown(wait=True)
        self.pool = ThreadPoolExecutor(APPLY_THREADS)
        print(f"busy: {self.count} unrelated pods created in {time.monotonic() - t:.0f}s", flush=True)
        threading.Thread(target=self._churn, daemon=True).start()

    def _churn(self) -> None:
        while not self.stopped.wait(1.0):
            for _ in range(int(self.rate)):
                self.pool.submit(
                    self.core.delete_namespaced_pod,
                    self.alive.pop(0),
                    self.namespace,
                    grace_period_seconds=0,
                    _preload_content=False,
                )
                self._create()

    def kept(self) -> int:
        """Pods in the namespace now (the list's count: one request of one pod)."""
        listed = self.core.list_namespaced_pod(self.namespace, limit=1)
        return len(listed.items) + (listed.metadata.remaining_item_count or 0)

    def stop(self) -> None:
        self.stopped.set()
        self.pool.shutdown(wait=False, cancel_futures=True)


def report(results: dict[str, dict], args, nodes: int) -> None:
    print(f"\n{args.jobs} gangs x {args.pods} pods at once on {nodes} nodes; seconds from each gang's creation:")
    for system, result in results.items():
        print(f"{system} (all gangs created in {result['apply_seconds']:.1f}s):")
        for stage, label in STAGE_LABELS.items():
            values = [s[stage] for s in result["stages"].values() if stage in s]
            print(
                f"  {label:18s} p50 {percentile(values, 0.5):6.2f}  p95 {percentile(values, 0.95):6.2f}  "
                f"max {max(values):6.2f}"
            )
        if "rss" in result:
            print(f"  controller: peak RSS {result['rss']:.0f} MiB, {result['cpu']:.1f} CPU seconds for the batch")
        if spent := result.get("control_plane_cpu"):
            each = ", ".join(f"{name} {seconds:.1f}" for name, seconds in sorted(spent.items(), key=lambda i: -i[1]))
            print(
                f"  control plane: {sum(spent.values()):.1f} CPU seconds in the batch's "
                f"{result['batch_seconds']:.1f}s ({each})"
            )
        for name, (p50, p95) in result.get("histograms", {}).items():
            print(f"  {RECONCILE_HISTOGRAMS[name]} (bucket bound): p50 <= {p50}s, p95 <= {p95}s")
        if "requests" in result:
            requests = result["requests"]
            counts = Counter({request: len(seconds) for request, seconds in requests.items()})
            clients: Counter[str] = Counter()
            for (who, _), n in counts.items():
                clients[who] += n
            by_client = ", ".join(f"{c} {n / args.jobs:.1f}" for c, n in clients.most_common())
            print(f"  API requests per gang: {clients.total() / args.jobs:.1f} ({by_client})")
            for who in CONTROLLERS:
                ours = ", ".join(f"{what} {n / args.jobs:.2f}" for (w, what), n in counts.most_common() if w == who)
                if ours:
                    print(f"    {who} per gang: {ours}")
            timed = [r for r in requests if r[0] in CONTROLLERS and r[1].split()[0] in TIMED_WRITES]
            for who, what in sorted(timed) + [r for r in REFERENCE_WRITES if r in requests]:
                seconds = requests[who, what]
                print(
                    f"    {who} {what}: {len(seconds)} in the API server p50 {percentile(seconds, 0.5):.3f}s"
                    f"  p95 {percentile(seconds, 0.95):.3f}s  max {max(seconds):.3f}s"
                )
    for base, (p50, p95) in running_ratios(results).items():
        print(f"longctx/{base}: all pods Running p50 x{p50:.2f}, p95 x{p95:.2f}")
    if IDLE in results and "longctx" in results:
        idle, busy = results[IDLE], results["longctx"]
        cpu, rss = busy["cpu"] / idle["cpu"], busy["rss"] / idle["rss"]
        print(f"longctx busy/idle: CPU seconds x{cpu:.2f}, peak RSS x{rss:.2f}")


IDLE = "longctx-idle"
GOALS = {"raw": 1.2, "jobset": 1.0}
"""Issue #31's goals for longctx's all-pods-Running p95 over each baseline's, in the same run."""


def running_ratios(results: dict[str, dict]) -> dict[str, tuple[float, float]]:
    """longctx's all-pods-Running p50 and p95 over each baseline's that ran beside it."""
    running = {system: [s["running"] for s in result["stages"].values()] for system, result in results.items()}
    return {
        base: tuple(percentile(running["longctx"], q) / percentile(running[base], q) for q in (0.5, 0.95))
        for base in GOALS
        if "longctx" in running and base in running
    }


def rotated(systems: list[str], round_: int) -> list[str]:
    """Round `round_`'s order: each system starts a round in turn, so none always runs first on a
    fresh cluster or last on one that has seen every other batch."""
    shift = round_ % len(systems)
    return systems[shift:] + systems[:shift]


def report_rounds(rounds: list[dict[str, dict]]) -> None:
    """Each round's p95 ratios against the goals, and how many rounds met each."""
    per_round = [running_ratios(r) for r in rounds]
    for base, goal in GOALS.items():
        p95s = [ratios[base][1] for ratios in per_round if base in ratios]
        if p95s:
            each = " ".join(f"x{p95:.2f}" for p95 in p95s)
            met = sum(p95 <= goal for p95 in p95s)
            print(f"longctx/{base} p95 by round: {each}; <= {goal} in {met} of {len(p95s)}")


def start_cluster(nodes: int, state: Path, args) -> tuple[Kubectl, Path]:
    """A private control plane with `nodes` simulated nodes, an audit log and the CRD."""
    policy = state.with_suffix(".audit-policy.json")
    policy.write_text(json.dumps(AUDIT_POLICY))
    t = time.monotonic()
    subprocess.run(
        [str(SCRIPTS / "up"), "--nodes", str(nodes)],
        check=True,
        stdout=subprocess.DEVNULL,
        env=os.environ
        | {
            "LONGCTX_CLUSTER_DIR": str(state),
            "LONGCTX_AUDIT_POLICY": str(policy),
            "LONGCTX_CONTROLLER_MANAGER_ARGS": " ".join(args.controller_manager_arg),
        },
    )
    print(f"cluster with {nodes} nodes up in {time.monotonic() - t:.1f}s", flush=True)
    cluster = Kubectl(state / "kubeconfig")
    cluster("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    cluster.wait_established(CRD_NAME)
    return cluster, state / "logs" / "audit.log"


def stop_cluster(state: Path) -> None:
    subprocess.run([str(SCRIPTS / "down")], env=os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}, check=False)


def busy(cluster: Kubectl, args, scratch: Path, audit: Path) -> dict[str, dict]:
    """longctx on the idle cluster, then longctx and JobSet while unrelated pods churn."""
    results = {IDLE: run_system("longctx", cluster, args, scratch, audit, label="-idle")}
    report({IDLE: results[IDLE]}, args, args.busy_nodes)  # printed at once: the busy runs are long
    churn = Churn(cluster, args.busy_pods, args.churn)
    churn.fill()
    try:
        for system in ("longctx", "jobset"):
            results[system] = run_system(system, cluster, args, scratch, audit, label="-busy")
            report({system: results[system]}, args, args.busy_nodes)
            print(f"busy: {churn.kept()} of {args.busy_pods} unrelated pods there after {system}'s batch", flush=True)
    finally:
        churn.stop()
    return results


def setting(text: str) -> tuple[str, object]:
    """KEY=JSON of --operator-setting, checked against the operator's configuration model."""
    key, _, value = text.partition("=")
    try:
        parsed = json.loads(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text}: the value is not JSON ({e})") from None
    try:
        OperatorConfig.model_validate(OPERATOR_CONFIG | {key: parsed})
    except ValidationError as e:
        error = e.errors()[0]
        raise argparse.ArgumentTypeError(f"{text}: {'.'.join(map(str, error['loc']))}: {error['msg']}") from None
    return key, parsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=512)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="which to run, in this order")
    parser.add_argument("--scenarios", default="quiet,busy", help="quiet (--systems on --nodes), busy, or both")
    parser.add_argument("--busy-nodes", type=int, default=2000)
    parser.add_argument("--busy-pods", type=int, default=20000, help="unrelated pods kept in the busy scenario")
    parser.add_argument("--churn", type=int, default=20, help="unrelated pods replaced per second")
    parser.add_argument(
        "--controller-manager-arg",
        action="append",
        default=[],
        help="an extra kube-controller-manager flag, e.g. --controller-manager-arg=--concurrent-job-syncs=50",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="quiet scenario: run --systems this many times, each round in another order",
    )
    parser.add_argument(
        "--operator-setting",
        action="append",
        default=[],
        type=setting,
        metavar="KEY=JSON",
        help="a field of the operator's configuration file (docs/operator.md), e.g. --operator-setting workers=32",
    )
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument(
        "--cluster-dir", type=Path, help="use this running cluster (hack/cluster/up's state) for one scenario"
    )
    args = parser.parse_args()
    systems, scenarios = args.systems.split(","), args.scenarios.split(",")
    if not set(systems) <= set(SYSTEMS):
        parser.error(f"--systems: choose from {', '.join(SYSTEMS)}")
    if not set(scenarios) <= {"quiet", "busy"}:
        parser.error("--scenarios: choose from quiet, busy")
    if args.rounds < 1:
        parser.error("--rounds: at least 1")

    scratch = Path(tempfile.mkdtemp(prefix="longctx-scale-"))
    try:
        for scenario in scenarios:
            state = args.cluster_dir or scratch / f"cluster-{scenario}"
            nodes = args.nodes if scenario == "quiet" else args.busy_nodes
            try:
                if args.cluster_dir:
                    cluster, audit = Kubectl(state / "kubeconfig"), state / "logs" / "audit.log"
                else:
                    cluster, audit = start_cluster(nodes, state, args)
                if scenario == "quiet":
                    rounds = []
                    for round_ in range(args.rounds):
                        rounds.append(
                            {s: run_system(s, cluster, args, scratch, audit) for s in rotated(systems, round_)}
                        )
                        print(f"\n== quiet, round {round_ + 1} of {args.rounds} ==")
                        report(rounds[-1], args, nodes)
                    if args.rounds > 1:
                        report_rounds(rounds)
                else:
                    print("\n== busy ==")
                    report(busy(cluster, args, scratch, audit), args, nodes)
                print(f"load average: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}", flush=True)
            finally:
                stop_cluster(state)
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
