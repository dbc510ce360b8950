"""The product end to end on real nodes of the local cluster (hack/cluster/real-nodes): the chart's
operator runs as a pod from the image built here, the quickstart's two trainer pods run as
containers on two kubelets, meet at rank 0 through the headless Service's DNS name (CoreDNS),
train, checkpoint to a volume both reach, and Succeed with progress scraped from rank 0's pod IP.
Debian's Prometheus scrapes the trainer pods through the chart's PodMonitor, translated to
Prometheus's own configuration. The fault test deletes a pod mid-run (a preemption: every rank
saves one step and the same Job resumes from it) and then kills a trainer process (a failure: the
operator restarts the whole gang, which resumes from the last checkpoint). The cluster runs Kueue's
manager: a higher-priority job preempts a running gang through Kueue, whose ranks save one step and
whose same Job resumes from it. With in-place restart a crashed trainer restarts the gang's trainers
inside the same pods. Every restart loads its compiled step from the compilation cache beside the
checkpoints. Every claim is read from the containers' own output (`kubectl logs`), not
only from the job's status."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from longctx_operator.api import parse_job
from longctx_operator.config import OperatorConfig
from longctx_operator.localrun import parse_event
from longctx_operator.names import COMPLETION_INDEX_LABEL, PLACEMENT_ANNOTATION, config_map_name
from longctx_operator.observe import pod_rank
from longctx_operator.placement import config_map_table, topology_levels
from longctx_trainer.contract import podenv
from longctx_trainer.contract.topology import tabled_placement
from longctx_trainer.faults import FAULT_EXIT_CODE
from support.cluster import Kubectl
from support.prometheus import Prometheus
from support.waiting import poll_until

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
NAME = QUICKSTART["metadata"]["name"]
COORDINATOR_PORT = 8476  # spec.network.coordinatorPort's default (operator/api/spec.py)
QUICKSTART_METRICS_PORT = 9400  # spec.metrics.port's default
CLUSTER_DOMAIN = "cluster.local"  # hack/cluster/real-nodes's CLUSTER_DOMAIN, the chart's operator.clusterDomain
TIMEOUT_SECONDS = 900


def pod_monitor(cluster) -> dict:
    """The chart's trainer PodMonitor, as `helm template` renders it where the Prometheus Operator's
    API is served."""
    rendered = subprocess.run(
        ["helm", "template", "longctx", str(REPO / "charts" / "longctx"), "--api-versions", "monitoring.coreos.com/v1"],
        check=True,
        capture_output=True,
        text=True,
        env=os.environ | {"PATH": f"{cluster.path}:{os.environ['PATH']}"},
    ).stdout
    return next(d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "PodMonitor")


def scrape_config(monitor: dict, targets_file: Path) -> dict:
    """What the Prometheus Operator generates from a PodMonitor, for the parts this one uses: its
    relabelings, metric relabelings and limits, and the namespace, pod and container target labels.
    Debian's Prometheus is built without Kubernetes service discovery, so the targets come from a
    file that `Targets` writes from the API server's pod list with the same `__meta_kubernetes_*`
    labels."""
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]

    def translated(rules: list[dict]) -> list[dict]:
        return [{"source_labels": r["sourceLabels"], "regex": r["regex"], "action": r["action"]} for r in rules]

    relabel = translated(endpoint["relabelings"])
    for label, meta in (("namespace", "namespace"), ("pod", "pod_name"), ("container", "pod_container_name")):
        relabel.append({"source_labels": [f"__meta_kubernetes_{meta}"], "target_label": label})
    return {
        "job_name": monitor["metadata"]["name"],
        "metrics_path": endpoint["path"],
        "scrape_interval": "2s",
        "scrape_timeout": "1s",
        "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "2s"}],
        "relabel_configs": relabel,
        "metric_relabel_configs": translated(endpoint["metricRelabelings"]),
        "sample_limit": monitor["spec"]["sampleLimit"],
        "label_limit": monitor["spec"]["labelLimit"],
        "label_name_length_limit": monitor["spec"]["labelNameLengthLimit"],
        "label_value_length_limit": monitor["spec"]["labelValueLengthLimit"],
    }


class Targets:
    """The pods the PodMonitor selects (its selector: a label that exists), one target per declared
    container port, labelled as Kubernetes service discovery labels them."""

    def __init__(self, cluster, monitor: dict, path: Path):
        (self.selector,) = monitor["spec"]["selector"]["matchExpressions"]
        assert self.selector["operator"] == "Exists", self.selector
        self.cluster, self.path = cluster, path
        path.write_text("[]")

    def refresh(self) -> None:
        pods = json.loads(self.cluster.kubectl("get", "pods", "-A", "-l", self.selector["key"], "-o", "json"))
        groups = [
            {
                "targets": [f"{pod['status']['podIP']}:{port['containerPort']}"],
                "labels": {
                    "__meta_kubernetes_namespace": pod["metadata"]["namespace"],
                    "__meta_kubernetes_pod_name": pod["metadata"]["name"],
                    "__meta_kubernetes_pod_container_name": container["name"],
                    "__meta_kubernetes_pod_container_port_name": port.get("name", ""),
                },
            }
            for pod in pods["items"]
            if pod["status"].get("podIP")
            for container in pod["spec"]["containers"]
            for port in container.get("ports", [])
        ]
        partial = self.path.with_suffix(".partial")
        partial.write_text(json.dumps(groups))
        partial.rename(self.path)  # Prometheus never reads half a file


@dataclass
class PodScraper:
    """Prometheus scraping the pods `targets` lists (refresh it as pods come and go)."""

    server: Prometheus
    targets: Targets

    def query(self, expr: str) -> list[dict]:
        return self.server.query(expr)


@pytest.fixture(scope="module")
def prometheus(real_cluster, tmp_path_factory):
    """Debian's Prometheus on this machine (it reaches pod IPs like any node), scraping the trainer
    pods as the chart's PodMonitor says."""
    workdir = tmp_path_factory.mktemp("prometheus")
    monitor = pod_monitor(real_cluster)
    targets = Targets(real_cluster, monitor, workdir / "targets.json")
    server = Prometheus(workdir, {"scrape_configs": [scrape_config(monitor, targets.path)]})
    try:
        yield PodScraper(server, targets)
    finally:
        server.stop()


def events(log: str) -> list[dict]:
    """The trainer's JSON progress lines in a container log."""
    return [event for line in log.splitlines() if (event := parse_event(line)) is not None]


class Job:
    """One LongContextJob in its own namespace, with a hostPath volume for its checkpoints."""

    def __init__(self, cluster, spec_changes: dict, namespaced: tuple[dict, ...] = ()):
        """`namespaced`: more objects for the job's namespace, applied before the job."""
        self.cluster = cluster
        self.namespace = f"real-{uuid.uuid4().hex[:6]}"
        self.checkpoints = cluster.state / "volumes" / self.namespace
        self.checkpoints.mkdir(parents=True)
        self.checkpoints.chmod(0o777)  # the trainer's uid 1000 writes there; hostPath has no fsGroup
        cluster.kubectl("create", "namespace", self.namespace)
        manifest = json.loads(json.dumps(QUICKSTART))
        manifest["spec"]["data"] = {"kind": "synthetic"}  # the example's corpus is not in the image
        manifest["spec"]["checkpoint"] |= {"path": "/checkpoints", "persistentVolumeClaim": "checkpoints"}
        for key, value in spec_changes.items():
            manifest["spec"][key] = value
        self.steps = manifest["spec"]["steps"]
        volume = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": self.namespace},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "hostPath": {"path": str(self.checkpoints), "type": "Directory"},
                "claimRef": {"namespace": self.namespace, "name": "checkpoints"},
            },
        }
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "checkpoints", "namespace": self.namespace},
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "storageClassName": "",
                "volumeName": self.namespace,
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
        self.apply(volume, claim, *namespaced)
        self.applied_at = time.monotonic()
        self.apply(manifest)

    def apply(self, *docs: dict) -> None:
        text = "\n---\n".join(yaml.safe_dump(d) for d in docs)
        self.cluster.kubectl("apply", "--namespace", self.namespace, "-f", "-", input=text)

    def get(self) -> dict:
        return json.loads(self.cluster.kubectl("get", "longcontextjob", NAME, "-n", self.namespace, "-o", "json"))

    def pods(self, generation: int) -> list[dict]:
        selector = f"longctx.io/job-name={NAME},longctx.io/generation={generation}"
        listed = json.loads(self.cluster.kubectl("get", "pods", "-n", self.namespace, "-l", selector, "-o", "json"))
        return sorted(listed["items"], key=lambda pod: pod["metadata"]["name"])

    def wait(self, predicate, what: str, timeout: float = TIMEOUT_SECONDS) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            job = self.get()
            if predicate(job):
                return job
            assert (job.get("status") or {}).get("phase") != "Failed" or "Failed" in what, self.describe(job)
            if time.monotonic() > deadline:
                pytest.fail(f"timed out waiting for {what}\n{self.describe(job)}")
            time.sleep(2)

    def saved_steps(self) -> list[int]:
        """The steps whose checkpoints are on the job's volume (orbax renames a step's folder to
        its number only once the save is complete)."""
        return sorted(int(p.name) for p in self.checkpoints.iterdir() if p.name.isdigit())

    def wait_for_a_checkpoint(self) -> None:
        """Returns once a step is saved, seen on the volume within a fraction of a step: a fault
        injected then lands mid-run on any machine, where the operator's status (read every 10 s)
        may first say so after the last step of a short job."""
        try:
            poll_until(self.saved_steps, TIMEOUT_SECONDS, interval=0.1, what="a checkpoint")
        except TimeoutError as error:
            pytest.fail(f"{error}\n{self.describe(self.get())}")

    def describe(self, job: dict) -> str:
        pods = self.cluster.kubectl("get", "pods", "-n", self.namespace, "-o", "wide", check=False)
        events = self.cluster.kubectl("get", "events", "-n", self.namespace, check=False)
        return f"status: {json.dumps(job.get('status'), indent=1)}\n{pods}\n{events}"

    def warnings(self, reason: str) -> list[str]:
        """The messages of the Warning Events the operator posted on the job with this reason, once
        there is one (or none after a minute): the operator posts an Event after the status patch
        that the test waited for, so the Event is listed a little later."""

        def listed() -> list[str]:
            items = json.loads(
                self.cluster.kubectl(
                    "get", "events", "-n", self.namespace, "-o", "json",
                    "--field-selector", f"involvedObject.kind=LongContextJob,reason={reason}",
                )
            )["items"]  # fmt: skip
            return [e["message"] for e in items if e["type"] == "Warning"]

        try:
            return poll_until(listed, 60, interval=1, what=f"a {reason} Event")
        except TimeoutError:
            return []

    def log_text(self, pod: dict, check: bool = True) -> str:
        return self.cluster.kubectl("logs", "-n", self.namespace, pod["metadata"]["name"], "-c", "trainer", check=check)

    def logs(self, pod: dict) -> list[dict]:
        return events(self.log_text(pod))

    def delete(self) -> None:
        self.cluster.kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)
        self.cluster.kubectl("delete", "persistentvolume", self.namespace, "--wait=false", check=False)


def phase(job: dict) -> str | None:
    return (job.get("status") or {}).get("phase")


def check_joined(job: Job, generation: int) -> list[list[dict]]:
    """Both pods' containers joined the same two-process job at rank 0's fully qualified DNS name
    (namespace, cluster domain and trailing dot: no search-path lookup), on two nodes."""
    pods = job.pods(generation)
    assert len(pods) == 2 and len({p["spec"]["nodeName"] for p in pods}) == 2, [p["spec"] for p in pods]
    logs = [job.logs(pod) for pod in pods]
    coordinator = f"{NAME}-g{generation}-0.{NAME}.{job.namespace}.svc.{CLUSTER_DOMAIN}.:{COORDINATOR_PORT}"
    for rank, pod_events in enumerate(logs):
        joined = pod_events[0]
        assert joined["event"] == "joined" and joined["rank"] == rank, pod_events[:3]
        assert joined["processes"] == 2 and joined["coordinator"] == coordinator, joined
    return logs


def check_ring_order(job: Job, rank0: list[dict]) -> None:
    """Rank 0 printed the ring order: the ranks sorted by their nodes' topology labels (the
    placement table in the gang's ConfigMap, else the operator's placement annotation on the pod,
    else the pod's own labels), then their nodes' names (trainer/topology.py); each context ring
    (four devices of one process) stays on its node."""
    ring = next((e for e in rank0 if e["event"] == "ring_order"), None)
    assert ring is not None, rank0[:4]
    pods = sorted(job.pods(1), key=lambda p: int(p["metadata"]["labels"][COMPLETION_INDEX_LABEL]))
    levels = topology_levels(parse_job(QUICKSTART).spec, OperatorConfig())  # the chart's default topologyLabels
    config_map = job.cluster.kubectl("get", "configmap", config_map_name(NAME), "-n", job.namespace, "-o", "json")
    table = config_map_table(json.loads(config_map))

    def value(pod: dict, key: str) -> str:
        placed = tabled_placement(table, pod["spec"]["nodeName"]) if table else None
        if placed is None:
            placed = json.loads((pod["metadata"].get("annotations") or {}).get(PLACEMENT_ANNOTATION, "{}"))
        return placed.get(key, pod["metadata"]["labels"].get(key, ""))

    placement = [(*(value(p, k) for k in levels), p["spec"]["nodeName"]) for p in pods]
    assert ring["order"] == sorted(range(2), key=lambda r: (placement[r], r)), (ring, placement)
    assert ring["rank_order"] == "topology" and ring["cross_hops"]["node"] == 0, ring
    print(f"ring order {ring['order']} on nodes {[placement[r][-1] for r in ring['order']]}: {ring['cross_hops']}")


def test_quickstart_trains_on_real_pods_and_succeeds(real_cluster, prometheus):
    job = Job(real_cluster, {})
    try:
        seen: dict = {}

        def finished(current: dict) -> bool:
            prometheus.targets.refresh()
            progress = (current.get("status") or {}).get("progress") or {}
            if progress.get("tokensPerSecond"):
                seen.update(progress)
            return phase(current) in ("Succeeded", "Failed")

        final = job.wait(finished, "the quickstart to finish")
        assert phase(final) == "Succeeded", job.describe(final)
        assert final["status"]["workers"]["succeeded"] == 2
        # Progress came from rank 0's exporter, scraped by the operator pod at the pod's IP.
        assert seen.get("tokensPerSecond", 0) > 0 and seen.get("step", 0) >= 1, seen
        rank0, rank1 = check_joined(job, 1)
        steps = [e["step"] for e in rank0 if e["event"] == "step"]
        assert steps == list(range(1, job.steps + 1)), steps
        assert rank0[-1] == {"event": "done", "step": job.steps}
        assert [e["event"] for e in rank1] == ["joined"]  # only rank 0 reports progress
        check_ring_order(job, rank0)
        interval = QUICKSTART["spec"]["checkpoint"]["intervalSteps"]
        saved = job.saved_steps()
        assert saved and saved[-1] == job.steps and all(s % interval == 0 or s == job.steps for s in saved), saved
        # Prometheus scraped both trainer pods at their pod IPs, through the PodMonitor's selection.
        pods = {p["metadata"]["name"]: p["status"]["podIP"] for p in job.pods(1)}
        scraped = prometheus.query(f'max_over_time(longctx_train_step{{namespace="{job.namespace}"}}[1h])')
        seen = {r["metric"]["pod"]: (r["metric"]["instance"], float(r["value"][1])) for r in scraped}
        assert set(seen) == set(pods), (seen, pods)
        for pod, (instance, step) in seen.items():
            assert instance == f"{pods[pod]}:{QUICKSTART_METRICS_PORT}" and step >= 1, (pod, instance, step)
    finally:
        job.delete()


def from_cache(rank0: list[dict]) -> bool:
    """Whether rank 0 loaded its training step from the compilation cache (trainer/compile_cache.py)."""
    (compiled,) = [e for e in rank0 if e["event"] == "compiled"]
    return compiled["from_cache"]


def resumed_at(rank0: list[dict]) -> int:
    """Rank 0 restored a checkpoint and went on from the step after it; the checkpoint's step."""
    resume = next((e for e in rank0 if e["event"] == "resume"), None)
    assert resume is not None and resume["step"] > 0, rank0[:3]
    first = next(e for e in rank0 if e["event"] == "step")
    assert first["step"] == resume["step"] + 1, (resume, first)
    return resume["step"]


def checkpointing(steps: int, interval: int, **spec: dict) -> dict:
    """Spec changes for a job of `steps` small steps (512 tokens, 1,024 a batch) with a checkpoint
    every `interval` steps on the job's `checkpoints` claim, and `spec`'s other changes."""
    checkpoint = {"path": "/checkpoints", "persistentVolumeClaim": "checkpoints", "intervalSteps": interval}
    return {"steps": steps, "sequenceLength": 512, "globalBatchTokens": 1024, "checkpoint": checkpoint, **spec}


def saving_on_preemption(steps: int, **spec: dict) -> dict:
    """Spec changes for a job of `steps` small steps whose only checkpoints are a preemption's and
    the last step's (interval checkpoints off), with 60 s to save on SIGTERM."""
    changes = checkpointing(steps, 1000, **spec)
    changes["checkpoint"]["preemptionGraceSeconds"] = 60
    return changes


IGNORED_FAILURES = "batch.kubernetes.io/job-index-ignored-failure-count"  # the Job controller's, per index


PREEMPTED_STEPS = 120
"""Steps of the preemption test's job: after the preemption in place the replaced gang runs for
about a minute, so the operator's progress read (every 10 s; a replaced rank 0 is read without the
backoff of the pod before it, progress.Backoff) sees it resume before the test kills a rank."""


def test_a_deleted_pod_saves_one_step_in_place_and_a_killed_rank_restarts_the_gang(real_cluster):
    """`kubectl delete pod` of rank 1 (graceful: SIGTERM) mid-run: both ranks save the same step k,
    with no interval checkpoint before it, and exit 85; the same Job replaces the pods, which resume
    at k + 1, no restart counted (status.lastRestart Preempted, resumedFromStep k). Then a killed
    trainer (SIGINT: no save) fails the gang, which restarts as generation 2 from step k."""
    job = Job(
        real_cluster, saving_on_preemption(PREEMPTED_STEPS, restartPolicy={"maxRestarts": 2, "backoffSeconds": 1})
    )

    def pod_name(pod: dict) -> str:
        return pod["metadata"]["name"]

    def live(generation: int) -> list[dict]:
        return [p for p in job.pods(generation) if p["status"].get("phase") in ("Pending", "Running")]

    try:
        job.wait(lambda j: ((j.get("status") or {}).get("progress") or {}).get("step", 0) >= 3, "step 3")
        first = check_joined(job, 1)
        assert not any(e["event"] == "resume" for e in first[0])  # from scratch
        real_cluster.kubectl("delete", "pod", "-n", job.namespace, pod_name(job.pods(1)[1]), "--wait=false")
        preempted = job.wait(
            lambda j: ((j.get("status") or {}).get("lastRestart") or {}).get("reason") == "Preempted",
            "the preemption in place",
        )
        k = preempted["status"]["lastRestart"]["checkpointStep"]
        assert k >= 3 and preempted["status"]["restarts"] == 0 and preempted["status"]["workloadGeneration"] == 1
        assert job.saved_steps() == [k]
        # The status may say Preempted from rank 1's termination message before rank 0's pod has
        # ended: wait for rank 0's, which alone logs the progress events.
        job.wait(
            lambda j: any(pod_rank(p) == 0 and p["status"].get("phase") == "Failed" for p in job.pods(1)),
            "rank 0's pod of generation 1 to end",
        )
        ended = [p for p in job.pods(1) if p["status"].get("phase") == "Failed"]  # rank 1's pod may be gone
        assert all(c["state"]["terminated"]["exitCode"] == 85 for p in ended for c in p["status"]["containerStatuses"])
        (rank0_ended,) = [p for p in ended if pod_rank(p) == 0]
        assert {"event": "preempted", "step": k} in job.logs(rank0_ended)
        resumed = job.wait(
            lambda j: (
                ((j.get("status") or {}).get("progress") or {}).get("resumedFromStep") == k
                and j["status"]["progress"].get("step", 0) > k
            ),
            "the replaced pods to resume",
        )
        assert resumed["status"]["workloadGeneration"] == 1 and resumed["status"]["restarts"] == 0
        (rank0, rank1) = live(1)
        assert resumed_at(job.logs(rank0)) == k and from_cache(job.logs(rank0))
        # Replaced per index (preemption.PER_INDEX_BACKOFF): each index counts its own ignored failure.
        ignored = {p["metadata"].get("annotations", {}).get(IGNORED_FAILURES) for p in (rank0, rank1)}
        assert ignored == {"1"}, ignored

        # PID 1, the launcher, forwards SIGINT to the trainer, which ends at once: a failure.
        real_cluster.kubectl(
            "exec", "-n", job.namespace, pod_name(rank1), "-c", "trainer", "--", "sh", "-c", "kill -INT 1"
        )
        job.wait(lambda j: (j.get("status") or {}).get("workloadGeneration") == 2, "the gang restart")
        final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
        assert phase(final) == "Succeeded" and final["status"]["restarts"] == 1, job.describe(final)
        assert final["status"]["lastRestart"]["reason"] == "RankFailed"
        last_rank0, _ = check_joined(job, 2)
        assert resumed_at(last_rank0) >= k and last_rank0[-1] == {"event": "done", "step": job.steps}
        assert from_cache(first[0]) is False and from_cache(last_rank0)
    finally:
        job.delete()


IN_PLACE_STEPS = 70
"""Steps of the in-place test's job: the gang runs for about 40 s after the restart, so the
operator's progress read (every 10 s; the reads refused while the trainer restarts do not slow it,
progress.Backoff) sees rank 0's restarted trainer before the job ends."""


def wide_column(cluster, job: Job, header: str) -> str:
    """The job's cell under `header` in `kubectl get lcj -o wide` (the CRD's printer columns)."""
    head, row = cluster.kubectl("get", "longcontextjob", NAME, "-n", job.namespace, "-o", "wide").splitlines()[:2]
    at = head.index(header)
    return row[at:].split(None, 1)[0] if row[at:].strip() else ""


def test_a_crashed_rank_restarts_in_place_and_the_gang_resumes_in_the_same_pods(real_cluster):
    """`restartPolicy.inPlace`: rank 1's trainer exits (a crash, `LONGCTX_FAULT_EXIT_AT_STEP`) after
    step 7, past the checkpoint of step 5. Both pods' launchers restart their trainers inside the
    same containers: no new generation, no restart counted, no container restarted, and with
    `maxRestarts: 0` a gang restart would have failed the job. Both trainers join again, rank 0
    resumes at step 6 and the job Succeeds. The status counts the one in-place restart
    (status.progress.inPlaceRestarts, the IN PLACE column) and one RestartedInPlace Event says so."""
    job = Job(
        real_cluster,
        checkpointing(
            IN_PLACE_STEPS,
            5,
            restartPolicy={"inPlace": True, "maxRestarts": 0},
            env=[{"name": podenv.FAULT_EXIT_AT_STEP, "value": "1:7"}],
        ),
    )
    try:
        final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
        assert phase(final) == "Succeeded", job.describe(final)
        assert final["status"]["restarts"] == 0 and final["status"]["workloadGeneration"] == 1, final["status"]
        assert final["status"]["progress"].get("inPlaceRestarts") == 1, job.describe(final)
        assert wide_column(real_cluster, job, "IN PLACE") == "1"
        posted = job.warnings("RestartedInPlace")
        assert len(posted) == 1 and "1 in-place restart in generation 1" in posted[0], job.describe(final)
        pods = job.pods(1)
        assert all(c["restartCount"] == 0 for p in pods for c in p["status"]["containerStatuses"]), pods
        texts = [job.log_text(p) for p in pods]
        said = f"in-place restart 1: rank 1 failed with exit code {FAULT_EXIT_CODE}"
        assert all(said in text for text in texts), [t[-3000:] for t in texts]
        assert all(sum(e["event"] == "joined" for e in events(text)) == 2 for text in texts)
        rank0 = events(texts[0])
        after = rank0[[i for i, e in enumerate(rank0) if e["event"] == "joined"][1] :]
        assert resumed_at(after) == 5 and after[-1] == {"event": "done", "step": job.steps}, after
        assert from_cache(after)
    finally:
        job.delete()


KUEUE = True  # this module's cluster runs Kueue's manager (tests/e2e/conftest.py)
KUEUE_API = "kueue.x-k8s.io/v1beta2"
CLUSTER_QUEUE = "real-nodes"
LOW, HIGH = "real-nodes-low", "real-nodes-high"


@pytest.fixture(scope="module")
def kueue_queue(real_cluster) -> dict:
    """A ClusterQueue with quota for exactly one quickstart gang (its pods' CPU and memory) that
    preempts lower priorities within itself, two WorkloadPriorityClasses, and the LocalQueue `q`
    that each job's namespace gets (returned)."""
    resources = QUICKSTART["spec"]["resources"]
    nodes = resources["nodes"]
    quota = {"cpu": str(nodes * int(resources["cpu"])), "memory": f"{nodes * int(resources['memory'][:-2])}Gi"}
    docs = [
        {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": LOW}, "value": 10},
        {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": HIGH}, "value": 1000},
        {"apiVersion": KUEUE_API, "kind": "ResourceFlavor", "metadata": {"name": CLUSTER_QUEUE}},
        {
            "apiVersion": KUEUE_API,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "preemption": {"withinClusterQueue": "LowerPriority"},
                "resourceGroups": [
                    {
                        "coveredResources": sorted(quota),
                        "flavors": [
                            {
                                "name": CLUSTER_QUEUE,
                                "resources": [{"name": r, "nominalQuota": q} for r, q in sorted(quota.items())],
                            }
                        ],
                    }
                ],
            },
        },
    ]
    real_cluster.kubectl("apply", "-f", "-", input="\n---\n".join(yaml.safe_dump(d) for d in docs))
    spec = {"clusterQueue": CLUSTER_QUEUE}
    return {"apiVersion": KUEUE_API, "kind": "LocalQueue", "metadata": {"name": "q"}, "spec": spec}


class Follow:
    """What a job's pods print and how their trainers end, kept while the pods are deleted (Kueue's
    suspension deletes them, and their logs with them): `kubectl logs -f` of each pod's trainer and
    `kubectl get pods -w` of their exit codes, from when they run."""

    def __init__(self, job: Job, generation: int, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True)
        kubectl, env = ["kubectl", "-n", job.namespace], Kubectl(job.cluster.kubeconfig).env
        self.pods = {pod_rank(p): p["metadata"]["name"] for p in job.pods(generation)}
        self.processes = [
            subprocess.Popen(
                [*kubectl, "logs", "-f", name, "-c", "trainer"],
                stdout=(folder / f"{name}.log").open("w"),
                stderr=subprocess.STDOUT,
                env=env,
            )
            for name in self.pods.values()
        ]
        exit_codes = '{.metadata.name} {.status.containerStatuses[0].state.terminated.exitCode}{"\\n"}'
        self.processes.append(
            subprocess.Popen(
                [*kubectl, "get", "pods", "-w", "-l", f"longctx.io/job-name={NAME}", "-o", f"jsonpath={exit_codes}"],
                stdout=(folder / "exit-codes").open("w"),
                stderr=subprocess.DEVNULL,
                env=env,
            )
        )

    def logs(self, rank: int) -> list[dict]:
        return events((self.folder / f"{self.pods[rank]}.log").read_text())

    def exit_codes(self) -> dict[str, int]:
        """Each followed pod's trainer exit code, once it has ended."""
        ended = [line.split() for line in (self.folder / "exit-codes").read_text().splitlines()]
        return {words[0]: int(words[1]) for words in ended if len(words) == 2 and words[0] in self.pods.values()}

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


def test_a_real_kueue_preemption_saves_one_step_and_the_same_job_resumes(real_cluster, kueue_queue, tmp_path):
    """A higher-priority job of the same size needs the only gang's quota: Kueue evicts the
    running gang (suspends its Job, whose pods are deleted gracefully); both ranks save the same
    step k, with no interval checkpoint before it, and exit 85; the high job runs and Succeeds;
    Kueue admits the low job's same Job (generation 1) again, whose new pods resume at k + 1, and
    it Succeeds. No generation and no restart are counted; the status and an Event carry Kueue's
    reason (Preempted), and the Workload counts the eviction (Kueue's requeue backoff,
    `requeueState`, is for its waitForPodsReady evictions: tests/integration/test_kueue.py)."""

    def spec(priority: str, steps: int) -> dict:
        scheduling = {"admission": "kueue", "queueName": "q", "workloadPriorityClassName": priority}
        return saving_on_preemption(steps, scheduling=scheduling)

    def progress(job: dict) -> dict:
        return (job.get("status") or {}).get("progress") or {}

    low = Job(real_cluster, spec(LOW, 60), (kueue_queue,))
    high = follow = None
    try:
        low.wait(lambda j: progress(j).get("step", 0) >= 3, "step 3")
        follow = Follow(low, 1, tmp_path / "low-g1")
        high = Job(real_cluster, spec(HIGH, 4), (kueue_queue,))

        def evicted(job: dict) -> bool:  # the status quotes Kueue's reason once the Workload says it
            status = job.get("status") or {}
            return status.get("reason") == "EvictedByKueue" and "Preempted" in status.get("message", "")

        low.wait(evicted, "Kueue's eviction, Preempted")
        finished_high = high.wait(lambda j: phase(j) in ("Succeeded", "Failed"), "the high-priority job to finish")
        assert phase(finished_high) == "Succeeded", high.describe(finished_high)

        # Both ranks of the low job ended on the preemption, exit 85, having saved step k alone.
        exits = follow.exit_codes()
        assert sorted(exits.values()) == [85, 85], (exits, low.describe(low.get()))
        (k,) = [e["step"] for e in follow.logs(0) if e["event"] == "preempted"]
        assert k >= 3, follow.logs(0)[-3:]
        assert low.saved_steps() == [k]

        # Kueue admitted the same Job again: its new pods resumed at k + 1, and the job finished.
        final = low.wait(lambda j: phase(j) in ("Succeeded", "Failed"), "the preempted job to finish")
        assert phase(final) == "Succeeded", low.describe(final)
        status = final["status"]
        assert status["workloadGeneration"] == 1 and status["restarts"] == 0, status
        assert status["lastRestart"]["reason"] == "EvictedByKueue" and status["progress"]["resumedFromStep"] == k
        jobs = json.loads(real_cluster.kubectl("get", "jobs", "-n", low.namespace, "-o", "json"))["items"]
        assert [j["metadata"]["name"] for j in jobs] == [f"{NAME}-g1"]
        rank0, _ = check_joined(low, 1)
        assert resumed_at(rank0) == k and rank0[-1] == {"event": "done", "step": low.steps}
        # The first pods compiled the step into the cache beside the checkpoints; the new ones loaded it.
        assert [from_cache(follow.logs(0)), from_cache(rank0)] == [False, True]
        assert len(low.warnings("EvictedByKueue")) == 1, low.warnings("EvictedByKueue")
        listed = real_cluster.kubectl("get", "workloads.kueue.x-k8s.io", "-n", low.namespace, "-o", "json")
        (workload,) = json.loads(listed)["items"]
        evictions = workload["status"]["schedulingStats"]["evictions"]
        assert [(e["reason"], e["count"]) for e in evictions] == [("Preempted", 1)], evictions
    finally:
        if follow is not None:
            follow.stop()
        for job in (low, high):
            if job is not None:
                job.delete()
