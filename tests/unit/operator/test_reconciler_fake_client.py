"""The reconciler's apply path (reconcile, _apply, scrape) against a fake Kubernetes client that
records calls: what it creates, patches and posts, in addition to the integration tests that run
the operator against the real API server (tests/integration/test_operator.py)."""

from __future__ import annotations

import asyncio
import copy
import http.server
import threading

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import REGISTRY

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.config import OperatorConfig
from longctx_operator.echo import ECHO_SECONDS
from longctx_operator.kube import NotOwned, owner_reference
from longctx_operator.reconciler import Reconciler
from longctx_operator.statuswrite import WORKERS_WRITE_SECONDS
from support.jobs import job_manifest

KEY = ("team", "fake")


def merge_patch(target: dict, patch: dict) -> dict:
    """RFC 7386 JSON merge patch, as the API server applies a status patch: None deletes a key,
    objects merge key by key."""
    merged = dict(target)
    for field, value in patch.items():
        if value is None:
            merged.pop(field, None)
        elif isinstance(value, dict) and isinstance(merged.get(field), dict):
            merged[field] = merge_patch(merged[field], value)
        else:
            merged[field] = {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
    return merged


class FakeKube:
    """The Kube interface (kube.py) over dicts: objects by (kind, namespace, name), every call
    recorded; `refuse` makes creates of one kind fail as the API server would."""

    def __init__(self, job: dict):
        self.job = copy.deepcopy(job)
        self.objects: dict[tuple[str, str, str], dict] = {}
        self.calls: list[tuple] = []
        self.events: list[tuple[str, str, str]] = []
        self.refuse: dict[str, Exception] = {}

    def create_owned(self, obj: dict, owner: dict) -> bool:
        kind, name = obj["kind"], obj["metadata"]["name"]
        self.calls.append(("create", kind, name))
        if kind in self.refuse:
            raise self.refuse[kind]
        assert obj["metadata"]["namespace"] == owner["metadata"]["namespace"]
        obj["metadata"] |= {"uid": f"uid-{name}", "ownerReferences": [owner_reference(owner)]}
        self.objects[(kind, owner["metadata"]["namespace"], name)] = copy.deepcopy(obj)
        return True

    def delete_job(self, namespace: str, name: str, uid: str) -> None:
        self.calls.append(("delete", "Job", name, uid))
        if self.objects.get(("Job", namespace, name), {}).get("metadata", {}).get("uid") == uid:
            del self.objects[("Job", namespace, name)]

    def delete_pod(self, namespace: str, name: str, uid: str, grace_seconds: int) -> None:
        self.calls.append(("delete", "Pod", name, uid, grace_seconds))

    def annotate_pod(self, namespace: str, name: str, uid: str, key: str, value: str) -> None:
        self.calls.append(("annotate", name, uid, key, value))

    def read_config_map(self, namespace: str, name: str) -> dict:
        self.calls.append(("read", "ConfigMap", name))
        if ("ConfigMap", namespace, name) not in self.objects:
            raise ApiException(status=404, reason="Not Found")
        return copy.deepcopy(self.objects[("ConfigMap", namespace, name)])

    def patch_status(self, namespace: str, name: str, status: dict) -> dict:
        self.calls.append(("patch-status", namespace, name))
        self.job["status"] = merge_patch(self.job.get("status") or {}, status)
        return copy.deepcopy(self.job)

    def post_event(self, owner: dict, type_: str, reason: str, message: str) -> None:
        self.calls.append(("event", type_, reason))
        self.events.append((type_, reason, message))


def job_object(annotations: dict | None = None, scheduling: dict | None = None) -> dict:
    return job_manifest(
        KEY[1],
        namespace=KEY[0],
        metadata={"uid": "u-1", "generation": 1, "annotations": annotations or {}},
        resources=(2, 8, "h100-80gb"),
        scheduling=scheduling or {"admission": "none"},
    )


def pod(index: int, phase: str = "Running", ready: bool = True) -> dict:
    return {
        "metadata": {
            "namespace": KEY[0],
            "name": f"fake-g1-{index}-x",
            "uid": f"pod-uid-{index}",
            "labels": {
                "longctx.io/job-name": KEY[1],
                "longctx.io/generation": "1",
                "batch.kubernetes.io/job-completion-index": str(index),
            },
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "fake-g1", "uid": "uid-fake-g1", "controller": True}
            ],
        },
        "spec": {"nodeName": f"node-{index}"},
        "status": {
            "phase": phase,
            "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "trainer", "ready": ready, "state": {"running": {}}}],
        },
    }


async def settle(reconciler: Reconciler) -> None:
    await reconciler.events_posted()


def run(coroutine):
    return asyncio.run(coroutine)


def make(annotations=None, config: OperatorConfig | None = None, scheduling=None) -> tuple[Reconciler, FakeKube]:
    kube = FakeKube(job_object(annotations, scheduling))
    reconciler = Reconciler(kube, config or OperatorConfig())
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)
    return reconciler, kube


def test_a_new_job_gets_its_status_then_service_config_and_job_then_events():
    reconciler, kube = make()

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    creates = [c for c in kube.calls if c[0] == "create"]
    assert kube.calls[0][0] == "patch-status"  # the generation is recorded before anything is created
    assert sorted(creates) == [
        ("create", "ConfigMap", "fake-trainer"),
        ("create", "Job", "fake-g1"),
        ("create", "Service", "fake"),
    ]
    kinds = [c[0] for c in kube.calls]
    assert len(kinds) - kinds[::-1].index("create") - 1 < kinds.index("event")  # Events never delay a create
    assert kube.job["status"]["phase"] == "Admitted" and kube.job["status"]["workloadGeneration"] == 1
    job = kube.objects[("Job", "team", "fake-g1")]
    assert job["spec"]["completions"] == 2
    assert ("Normal", reasons.PLANNED) in [(t, r) for t, r, _ in kube.events]


class GaugeReadingKube(FakeKube):
    """Records the phase gauge as each create starts: after the status write, before the workload."""

    def __init__(self, job: dict):
        super().__init__(job)
        self.admitted_at_create: list[float | None] = []

    def create_owned(self, obj: dict, owner: dict) -> bool:
        self.admitted_at_create.append(REGISTRY.get_sample_value("longctx_operator_jobs", {"phase": "Admitted"}))
        return super().create_owned(obj, owner)


def test_the_phase_gauge_counts_the_written_status_before_the_workload_is_created():
    """The gauge used to be set after every write of the decision (creates, placement) and not at all
    when one failed: a refused create left the job counted Pending while its status said Admitted."""
    kube = GaugeReadingKube(job_object())
    kube.refuse["Job"] = ApiException(status=403, reason="Forbidden")
    reconciler = Reconciler(kube, OperatorConfig())
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)
    assert REGISTRY.get_sample_value("longctx_operator_jobs", {"phase": "Pending"}) == 1  # no status yet

    async def go():
        with pytest.raises(ApiException):
            await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert kube.job["status"]["phase"] == "Admitted"
    assert kube.admitted_at_create == [1, 1, 1]
    assert REGISTRY.get_sample_value("longctx_operator_jobs", {"phase": "Admitted"}) == 1
    assert REGISTRY.get_sample_value("longctx_operator_jobs", {"phase": "Pending"}) == 0
    reconciler.job_event(copy.deepcopy(kube.job), deleted=True)
    assert REGISTRY.get_sample_value("longctx_operator_jobs", {"phase": "Admitted"}) == 0


def test_a_starting_gang_is_written_once_per_transition_and_its_counts_with_the_next():
    """Ranks come up one by one: the condition changes are written at once, each with one patch and
    its Event; a change of the Ready count alone, or the move to Starting, waits for the next write,
    or WORKERS_WRITE_SECONDS (the operator used to patch the status on every count: 6 patches here,
    then 5 with Starting written at once)."""
    reconciler, kube = make()
    patches = []

    async def step() -> float:
        requeue = await reconciler.reconcile(KEY)
        patches.append(sum(1 for c in kube.calls if c[0] == "patch-status"))
        return requeue

    async def go() -> float:
        await step()  # Admitted
        reconciler.workload_event(copy.deepcopy(kube.objects[("Job", "team", "fake-g1")]), deleted=False)
        await step()  # the Job's counts (2 ranks, none Ready): wait
        reconciler.pod_event(pod(0, ready=False), deleted=False)
        await step()  # Starting: waits
        reconciler.pod_event(pod(1, ready=False), deleted=False)
        await step()  # Running, with the phase and counts that waited
        reconciler.pod_event(pod(0), deleted=False)
        waited = await step()  # 1 of 2 Ready: waits
        reconciler.pod_event(pod(1), deleted=False)
        await step()  # Rendezvous, with the count that waited
        reconciler.pod_event(pod(1, ready=False), deleted=False)
        await step()  # 1 of 2 Ready again: waits ...
        reconciler.jobs[KEY].unwritten_since -= WORKERS_WRITE_SECONDS
        await step()  # ... written when due
        await settle(reconciler)
        return waited

    waited = run(go())
    assert patches == [1, 1, 1, 2, 2, 3, 3, 4]
    assert 0 < waited <= WORKERS_WRITE_SECONDS
    status = kube.job["status"]
    assert status["phase"] == "Running" and status["workers"] == {"total": 2, "ready": 1, "failed": 0, "succeeded": 0}
    assert {c["type"]: c["status"] for c in status["conditions"]}[cond.RENDEZVOUS] == "True"
    reasons_posted = [r for _, r, _ in kube.events]
    assert reasons_posted.count(reasons.ALL_RANKS_RUNNING) == 1 and reasons_posted.count(reasons.ALL_RANKS_READY) == 1


def test_running_pods_then_progress_scraped_from_an_allowed_metrics_url():
    text = "longctx_train_step 7\nlongctx_train_tokens_per_second 1234.5\nlongctx_train_loss 2.5\n"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _serving(text))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
    try:
        reconciler, kube = make(
            {"longctx.io/metrics-url": url}, OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"])
        )

        async def go():
            await reconciler.reconcile(KEY)
            reconciler.workload_event(copy.deepcopy(kube.objects[("Job", "team", "fake-g1")]), deleted=False)
            for index in range(2):
                reconciler.pod_event(pod(index), deleted=False)
            await reconciler.reconcile(KEY)
            await reconciler.reconcile(KEY)
            await reconciler.progress.scrape(KEY, reconciler.progress.endpoint(KEY))
            await settle(reconciler)

        run(go())
    finally:
        server.shutdown()
    assert kube.job["status"]["phase"] == "Running"
    progress = kube.job["status"]["progress"]
    assert (progress["step"], progress["tokensPerSecond"], progress["loss"]) == (7, 1234.5, 2.5)
    assert progress["percentComplete"] == 0.7  # 7 of the default 1000 steps; no ETA after one read
    assert "eta" not in progress


def test_a_refused_create_is_reported_in_the_status_and_retried():
    reconciler, kube = make()
    kube.refuse["Job"] = ApiException(status=403, reason="Forbidden")

    async def go():
        with pytest.raises(ApiException):
            await reconciler.reconcile(KEY)
        with pytest.raises(ApiException):  # the next decision reports the refusal, then retries
            await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert kube.job["status"]["reason"] == reasons.WORKLOAD_CREATE_FAILED
    assert "403 Forbidden" in kube.job["status"]["message"]
    assert [c for c in kube.calls if c[:2] == ("create", "Job")] == [("create", "Job", "fake-g1")] * 2
    assert ("Warning", reasons.WORKLOAD_CREATE_FAILED) in [(t, r) for t, r, _ in kube.events]


def test_a_name_owned_by_someone_else_fails_the_job_and_nothing_is_deleted():
    reconciler, kube = make()
    kube.refuse["Job"] = NotOwned("Job fake-g1 already exists and is not owned by LongContextJob fake")

    async def go():
        with pytest.raises(NotOwned):
            await reconciler.reconcile(KEY)
        await reconciler.reconcile(KEY)  # the refusal is for good: the job fails
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert (kube.job["status"]["phase"], kube.job["status"]["reason"]) == ("Failed", reasons.NAME_TAKEN)
    assert "not owned by LongContextJob fake" in kube.job["status"]["message"]
    assert [c for c in kube.calls if c[0] == "delete"] == []
    assert [c for c in kube.calls if c[:2] == ("create", "Job")] == [("create", "Job", "fake-g1")]


def test_a_leftover_of_an_earlier_job_of_the_same_name_is_waited_for():
    """The garbage collector is still removing the Job of a deleted LongContextJob of this name:
    the create is retried (as any refusal), not failed."""
    reconciler, kube = make()
    kube.refuse["Job"] = NotOwned("Job fake-g1 already exists and is not owned by LongContextJob fake", transient=True)

    async def go():
        for _ in range(2):
            with pytest.raises(NotOwned):
                await reconciler.reconcile(KEY)
        del kube.refuse["Job"]
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert kube.job["status"]["reason"] == reasons.WORKLOAD_CREATE_FAILED and kube.job["status"]["phase"] == "Admitted"
    assert ("Job", "team", "fake-g1") in kube.objects


def test_a_gang_restart_deletes_only_the_job_it_created():
    """Rank 1 fails: the restart deletes generation 1's Job by name and with its uid as a
    precondition (the API server refuses the delete of any other Job of that name), and stops
    that Job's pods within BROKEN_GANG_GRACE_SECONDS, each with its uid as a precondition."""
    reconciler, kube = make()

    async def go():
        await reconciler.reconcile(KEY)
        reconciler.workload_event(copy.deepcopy(kube.objects[("Job", "team", "fake-g1")]), deleted=False)
        reconciler.pod_event(pod(0), deleted=False)
        reconciler.pod_event(pod(1, phase="Failed", ready=False), deleted=False)
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert kube.job["status"]["phase"] == "Restarting"
    deletes = [c for c in kube.calls if c[0] == "delete"]
    assert deletes[0] == ("delete", "Job", "fake-g1", "uid-fake-g1")
    assert sorted(deletes[1:]) == [
        ("delete", "Pod", p["metadata"]["name"], p["metadata"]["uid"], 5) for p in (pod(0), pod(1))
    ]


def test_builtin_admission_is_counted_off_the_event_loop_and_a_refusal_stands_its_backoff(monkeypatch):
    """No GPU nodes: the gang is refused. It was counted once, in the admission thread (it reads
    every node and pod), and neither the next reconciliation nor freed GPUs count it again until
    its backoff has passed."""
    from longctx_operator import reconciler as module

    on_loop_thread = []
    count = module.admit_gang

    def recorded(*args):
        on_loop_thread.append(threading.current_thread() is threading.main_thread())
        return count(*args)

    monkeypatch.setattr(module, "admit_gang", recorded)
    reconciler, kube = make(scheduling={"admission": "builtin"})

    async def go():
        first = await reconciler.reconcile(KEY)
        await reconciler.reconcile(KEY)
        reconciler.queue._dirty.clear()
        reconciler.wake_pending()
        await settle(reconciler)
        return first

    requeue = run(go())
    assert on_loop_thread == [False]
    assert (kube.job["status"]["phase"], kube.job["status"]["reason"]) == ("Pending", reasons.INSUFFICIENT_GPUS)
    assert 4 < requeue <= 5 and reconciler.queue._dirty == set()


def test_forced_kueue_admission_creates_the_job_suspended_in_the_default_queue():
    reconciler, kube = make(config=OperatorConfig(force_admission="kueue", default_kueue_queue="shared"))

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    job = kube.objects[("Job", "team", "fake-g1")]
    assert job["spec"]["suspend"] and job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "shared"
    assert (kube.job["status"]["phase"], kube.job["status"]["reason"]) == ("Pending", reasons.QUEUED_IN_KUEUE)


def test_pod_annotations_outside_the_allow_list_create_nothing():
    reconciler, kube = make({"longctx.io/pod-annotations": '{"k8s.v1.cni.cncf.io/networks": "kube-system/x"}'})

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert not [c for c in kube.calls if c[0] == "create"]
    conditions = {c["type"]: c for c in kube.job["status"]["conditions"]}
    assert conditions[cond.POD_ANNOTATIONS_ACCEPTED]["status"] == "False"
    assert ("Warning", reasons.POD_ANNOTATIONS_REJECTED) in [(t, r) for t, r, _ in kube.events]


def _serving(text: str):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            body = text.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    return Handler


def test_a_priority_class_outside_the_allow_list_holds_the_job_with_its_reason():
    reconciler, kube = make()
    kube.job["spec"]["scheduling"]["priorityClassName"] = "system-node-critical"
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert not [c for c in kube.calls if c[0] == "create"]
    status = kube.job["status"]
    assert (status["phase"], status["reason"]) == ("Pending", reasons.SETTING_NOT_ALLOWED)
    assert "spec.scheduling.priorityClassName system-node-critical" in status["message"]
    assert ("Warning", reasons.SETTING_NOT_ALLOWED) in [(t, r) for t, r, _ in kube.events]


@pytest.mark.parametrize(
    ("allow_list", "created"),
    [({}, False), ({"namespaces": {"team": {"fabrics": ["infiniband"], "networks": ["ib-*"]}}}, True)],
    ids=["default", "allowed-in-team"],
)
def test_fabric_and_networks_come_from_the_operators_allow_list(allow_list, created):
    job = job_object()
    job["spec"]["network"] = {"fabric": "infiniband", "networks": ["ib-0"]}
    kube = FakeKube(job)
    reconciler = Reconciler(kube, OperatorConfig.model_validate({"networkAllowList": allow_list}))
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert bool([c for c in kube.calls if c[0] == "create"]) is created
    if not created:
        assert kube.job["status"]["reason"] == reasons.NETWORK_NOT_ALLOWED
        assert kube.job["status"]["message"].startswith('spec.network.networks[0]: "ib-0" is not allowed')
        assert ("Warning", reasons.NETWORK_NOT_ALLOWED) in [(t, r) for t, r, _ in kube.events]


def test_the_gang_network_policy_is_created_with_the_workload_when_configured():
    kube = FakeKube(job_object())
    reconciler = Reconciler(kube, OperatorConfig.model_validate({"gangNetworkPolicy": {"enabled": True}}))
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert ("create", "NetworkPolicy", "fake") in kube.calls
    policy = kube.objects[("NetworkPolicy", "team", "fake")]
    assert policy["spec"]["podSelector"] == {"matchLabels": {"longctx.io/job-name": "fake"}}


def test_bound_ranks_get_their_placement_and_a_late_node_places_its_pod_when_it_arrives():
    """operator/placement.py through the reconciler: pod 0's node is cached, pod 1's is not yet;
    its node event queues the job again, and that reconciliation places pod 1."""
    from longctx_operator.names import PLACEMENT_ANNOTATION

    reconciler, kube = make(config=OperatorConfig(topology_labels=["example.com/rack"]))

    def node(index: int) -> dict:
        return {"metadata": {"name": f"node-{index}", "labels": {"example.com/rack": f"r{index}"}}}

    async def go():
        await reconciler.reconcile(KEY)
        reconciler.workload_event(copy.deepcopy(kube.objects[("Job", "team", "fake-g1")]), deleted=False)
        reconciler.node_event(node(0), deleted=False)
        for index in range(2):
            reconciler.pod_event(pod(index), deleted=False)
        await reconciler.reconcile(KEY)
        placed = [c for c in kube.calls if c[0] == "annotate"]
        assert placed == [("annotate", "fake-g1-0-x", "pod-uid-0", PLACEMENT_ANNOTATION, '{"example.com/rack":"r0"}')]
        assert reconciler.awaiting_nodes == {"node-1": {KEY}}
        placed_pod = pod(0)
        placed_pod["metadata"]["annotations"] = {PLACEMENT_ANNOTATION: placed[0][-1]}
        reconciler.pod_event(placed_pod, deleted=False)  # the watch delivers it: not written again
        while reconciler.queue._queue.qsize():  # the coalesced pod events' keys: drained
            reconciler.queue.done(await reconciler.queue.get())
        reconciler.node_event(node(1), deleted=False)
        assert await asyncio.wait_for(reconciler.queue.get(), 1) == KEY and not reconciler.awaiting_nodes
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert [c[1] for c in kube.calls if c[0] == "annotate"] == ["fake-g1-0-x", "fake-g1-1-x"]


def gpu_node(index: int) -> dict:
    """A node the fake job's pods may run on (its GPU product, GPUs, no taints), in rack r<index>."""
    labels = {"example.com/rack": f"r{index}", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    return {
        "metadata": {"name": f"node-{index}", "labels": labels},
        "spec": {"taints": []},
        "status": {"allocatable": {"nvidia.com/gpu": "8"}},
    }


def test_ranks_on_nodes_the_table_holds_get_no_annotation_even_after_a_restart():
    """Node 0 is cached when the workload is created: the ConfigMap's table holds it and its pod is
    never annotated; node 1 arrives later and its pod gets the annotation. A new operator process
    reads the table from the ConfigMap once and annotates nothing more."""
    from longctx_operator.placement import config_map_table
    from longctx_trainer.contract.topology import tabled_placement

    config = OperatorConfig(topology_labels=["example.com/rack"])
    reconciler, kube = make(config=config)
    reconciler.node_event(gpu_node(0), deleted=False)

    def observe(operator: Reconciler) -> None:
        operator.workload_event(copy.deepcopy(kube.objects[("Job", "team", "fake-g1")]), deleted=False)
        for index in range(2):
            operator.node_event(gpu_node(index), deleted=False)
            operator.pod_event(pod(index), deleted=False)

    async def go():
        await reconciler.reconcile(KEY)
        observe(reconciler)
        await reconciler.reconcile(KEY)
        await settle(reconciler)
        restarted = Reconciler(kube, config)
        restarted.job_event(copy.deepcopy(kube.job), deleted=False)
        observe(restarted)
        await restarted.reconcile(KEY)
        await settle(restarted)

    run(go())
    table = config_map_table(kube.objects[("ConfigMap", "team", "fake-trainer")])
    assert tabled_placement(table, "node-0") == {"example.com/rack": "r0"}
    assert tabled_placement(table, "node-1") is None
    assert [c[1] for c in kube.calls if c[0] == "annotate"] == ["fake-g1-1-x", "fake-g1-1-x"]  # the restart's
    assert [c for c in kube.calls if c[0] == "read"] == [("read", "ConfigMap", "fake-trainer")]


def test_writes_the_watch_has_not_shown_yet_are_not_sent_again():
    """The echo of the status write queues the job before the watch shows its Job, and pod events
    before it shows their placement: the workload is not created again (create-or-get: 7 requests
    more) nor a pod annotated twice, until the echo is overdue."""
    reconciler, kube = make(config=OperatorConfig(topology_labels=["example.com/rack"]))
    reconciler.node_event({"metadata": {"name": "node-0", "labels": {"example.com/rack": "r0"}}}, deleted=False)
    creates = []

    async def step() -> None:
        await reconciler.reconcile(KEY)
        creates.append(sum(1 for c in kube.calls if c[0] == "create"))

    async def go():
        await step()
        reconciler.job_event(copy.deepcopy(kube.job), deleted=False)  # the status write's echo
        await step()
        assert creates == [3, 3]
        generation, at = reconciler.jobs[KEY].created
        reconciler.jobs[KEY].created = (generation, at - ECHO_SECONDS)  # no Job shown in time
        await step()
        reconciler.workload_event(copy.deepcopy(kube.objects[("Job", "team", "fake-g1")]), deleted=False)
        reconciler.pod_event(pod(0), deleted=False)
        await step()
        reconciler.pod_event(pod(0), deleted=False)  # another event of the pod, before its placement's
        await step()
        await settle(reconciler)

    run(go())
    assert creates == [3, 3, 6, 6, 6]
    assert [c[1] for c in kube.calls if c[0] == "annotate"] == ["fake-g1-0-x"]


class VersionedKube(FakeKube):
    """Every write of the job gives it a new resourceVersion, as the API server does."""

    def __init__(self, job: dict):
        super().__init__(job)
        self.version = 1
        self.job["metadata"]["resourceVersion"] = "1"

    def patch_status(self, namespace: str, name: str, status: dict) -> dict:
        self.version += 1
        self.job["metadata"]["resourceVersion"] = str(self.version)
        return super().patch_status(namespace, name, status)


def test_the_echo_of_its_own_status_write_is_not_decided_again():
    """The watch event of the status the reconciler wrote holds nothing it has not decided on: it
    queues nothing and starts no reconcile latency. Any newer version (anyone else's write, the
    progress poller's included) is decided on as before."""
    kube = VersionedKube(job_object())
    reconciler = Reconciler(kube, OperatorConfig())
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)

    async def go():
        assert await reconciler.queue.get() == KEY
        await reconciler.reconcile(KEY)
        reconciler.queue.done(KEY)
        await settle(reconciler)
        echo = copy.deepcopy(kube.job)
        reconciler.job_event(echo, deleted=False)
        assert reconciler.queue._queue.empty() and KEY not in reconciler._event_at
        kube.version += 1
        reconciler.job_event(echo | {"metadata": echo["metadata"] | {"resourceVersion": str(kube.version)}}, False)
        assert reconciler.queue._queue.qsize() == 1 and KEY in reconciler._event_at

    run(go())
    assert [c[0] for c in kube.calls].count("patch-status") == 1


class SlowStatusKube(FakeKube):
    """Two jobs' API: the status write of job "slow" waits until `release` is set (a loaded API
    server answers a status patch in seconds: 1 to 6 s in benchmarks/operator_scale.py, 2026-11-27)."""

    def __init__(self, jobs: list[dict]):
        super().__init__(jobs[0])
        self.jobs = {j["metadata"]["name"]: copy.deepcopy(j) for j in jobs}
        self.release = threading.Event()

    def patch_status(self, namespace: str, name: str, status: dict) -> dict:
        if name == "slow":
            self.release.wait(10)
        self.calls.append(("patch-status", namespace, name))
        job = self.jobs[name]
        job["status"] = merge_patch(job.get("status") or {}, status)
        return copy.deepcopy(job)


def test_a_jobs_slow_status_write_holds_no_worker_from_the_next_jobs_decision():
    """One worker: job "slow" is decided first and its status write hangs; job "fast" is still
    decided and its workload created (a worker used to wait through every write of its job, so 16
    workers served a burst of 50 gangs in rounds of seconds)."""
    jobs = [
        job_manifest(
            name,
            namespace="team",
            metadata={"uid": f"u-{name}", "generation": 1},
            resources=(2, 8, "h100-80gb"),
            scheduling={"admission": "none"},
        )
        for name in ("slow", "fast")
    ]
    kube = SlowStatusKube(jobs)
    reconciler = Reconciler(kube, OperatorConfig(workers=1))

    async def go() -> list[tuple]:
        for job in jobs:
            reconciler.job_event(copy.deepcopy(job), deleted=False)
        reconciler.start()
        try:
            for _ in range(300):
                if ("create", "Job", "fast-g1") in kube.calls:
                    break
                await asyncio.sleep(0.01)
            return list(kube.calls)
        finally:
            kube.release.set()
            await reconciler.stop()

    calls = run(go())
    assert ("create", "Job", "fast-g1") in calls and ("patch-status", "team", "slow") not in calls


def test_a_new_spec_is_planned_in_the_thread_pool_not_on_the_event_loop(monkeypatch):
    """Some plans take seconds (an adaptive job's draw on many GPUs): the reconciler plans a new
    spec in its threads, and the decision on the event loop finds that plan (resolve.py's memo)."""
    from longctx_operator import resolve

    threads: list[str] = []
    real = resolve.plan

    def recording(request):
        threads.append(threading.current_thread().name)
        return real(request)

    monkeypatch.setattr(resolve, "plan", recording)
    resolve._plan.cache_clear()
    reconciler, kube = make()

    async def go():
        await reconciler.reconcile(KEY)
        await settle(reconciler)

    run(go())
    assert kube.job["status"]["layout"]["data"] >= 1  # planned and recorded
    assert len(threads) == 1 and threads[0] != threading.main_thread().name, threads


def test_a_job_is_validated_once_per_version_and_a_new_version_is_decided_on(monkeypatch):
    """Most decisions follow a pod's event on an unchanged job: they reuse the spec and status
    validated at its resourceVersion; any write makes a new version, which is validated afresh."""
    from longctx_operator import reconciler as reconciler_module

    validated: list[str] = []
    real = reconciler_module.LongContextJob

    class Counting:
        @staticmethod
        def model_validate(obj):
            validated.append(obj["metadata"].get("resourceVersion"))
            return real.model_validate(obj)

    monkeypatch.setattr(reconciler_module, "LongContextJob", Counting)
    kube = VersionedKube(job_object())
    reconciler = Reconciler(kube, OperatorConfig())
    reconciler.job_event(copy.deepcopy(kube.job), deleted=False)

    async def go():
        await reconciler.reconcile(KEY)  # admits and writes version 2
        await reconciler.reconcile(KEY)  # decides on 2
        await reconciler.reconcile(KEY)  # 2 again: nothing changed
        changed = copy.deepcopy(kube.job)
        changed["metadata"] |= {"resourceVersion": "20", "generation": 2}
        changed["spec"]["sequenceLength"] = 8192
        reconciler.job_event(changed, deleted=False)
        await reconciler.reconcile(KEY)  # the new spec
        await settle(reconciler)

    run(go())
    assert validated == ["1", "2", "20"]
    assert kube.job["status"]["observedGeneration"] == 2  # the decision saw the new spec
