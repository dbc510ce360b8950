"""The operator as a real process on the local control plane (docs/operator.md).

One operator (`longctx operator --all-namespaces`) serves every test of this module; each test
has its own namespace. KWOK plays the kubelet: the jobs' pods carry its lifecycle annotations
through the job's longctx.io/pod-annotations annotation (docs/cluster.md).
"""

from __future__ import annotations

import json
import re
import urllib.request

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from support import operator_harness as h
from support.exporters import stepping_exporter

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("suspend_leftovers")]
FAST = {"longctx.io/complete-after": "4s"}


POOL = "operator-tests"
READER = {"app.kubernetes.io/name": "prometheus"}


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    """The operator, and four GPU nodes of this module's own pool (other tests' pods cannot take them)."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=4)
    # Every job is fenced by its own NetworkPolicy (the chart's networkPolicy.enabled).
    fence = {"gangNetworkPolicy": {"enabled": True, "metricsReaders": [{"podSelector": {"matchLabels": READER}}]}}
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes, fence) as op:
        yield op


def pool_job(name: str, **kwargs) -> dict:
    return h.job_manifest(name, pool=POOL, **kwargs)


def test_create_admitted_running_succeeded(operator, kubectl, wait_until):
    kubectl.apply(pool_job("happy", pod_annotations=FAST))
    done = h.wait_phase(kubectl, wait_until, "happy", "Succeeded")
    status = done["status"]
    assert status["workloadGeneration"] == 1 and status["restarts"] == 0
    assert status["currentWorkload"] == "happy-g1"
    assert status["workers"]["total"] == 2 and status["workers"]["succeeded"] == 2
    assert status["layout"]["processes"] == 2
    assert h.conditions(done) == {
        cond.LAYOUT_PLANNED: ("True", reasons.PLANNED),
        cond.ADMITTED: ("True", reasons.GANG_FITS),
        cond.RUNNING: ("False", reasons.COMPLETED),
        cond.RENDEZVOUS: ("False", reasons.COMPLETED),
        cond.SUCCEEDED: ("True", reasons.COMPLETED),
    }
    h.wait_event(kubectl, wait_until, "happy", "Normal", reasons.COMPLETED)
    assert h.events(kubectl, "happy") == [
        ("Normal", reasons.PLANNED),
        ("Warning", reasons.CHECKPOINT_NOT_PERSISTENT),
        ("Normal", reasons.GANG_FITS),
        ("Normal", reasons.ALL_RANKS_RUNNING),
        ("Normal", reasons.ALL_RANKS_READY),
        ("Normal", reasons.COMPLETED),
    ]
    kids = h.children(kubectl, "happy")
    assert (kids["services"], kids["configmaps"], kids["jobs"]) == (["happy"], ["happy-trainer"], ["happy-g1"])
    job = kubectl.json("get", "job", "happy-g1")
    owner = job["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "LongContextJob",
        "happy",
        done["metadata"]["uid"],
        True,
    )
    assert job["spec"]["template"]["metadata"]["annotations"]["longctx.io/complete-after"] == "4s"


def test_one_failed_rank_restarts_the_whole_gang(operator, kubectl, wait_until):
    kubectl.apply(pool_job("flaky", pod_annotations={"longctx.io/complete-after": "8s"}))
    h.wait_phase(kubectl, wait_until, "flaky", "Running")
    rank1 = kubectl.pods("longctx.io/job-name=flaky,batch.kubernetes.io/job-completion-index=1")[0]
    kubectl.run("annotate", "pod", rank1["metadata"]["name"], "longctx.io/fail=true", "longctx.io/exit-code=7")
    done = h.wait_phase(kubectl, wait_until, "flaky", "Succeeded")
    assert (done["status"]["restarts"], done["status"]["workloadGeneration"]) == (1, 2)
    assert h.children(kubectl, "flaky")["jobs"] == ["flaky-g2"]
    h.wait_event(kubectl, wait_until, "flaky", "Normal", reasons.COMPLETED)
    events = h.event_objects(kubectl, "flaky")
    seen = [e["reason"] for e in events]
    assert seen.index(reasons.RANK_FAILED) < seen.index(reasons.RECOVERED) < seen.index(reasons.COMPLETED)
    failed = next(e for e in events if e["reason"] == reasons.RANK_FAILED and e["type"] == "Warning")
    assert failed["message"].startswith("gang restart 1: rank 1 (pod flaky-g1-1-")
    assert failed["message"].endswith("container trainer terminated: Error, exit code 7")


def test_failing_every_time_fails_after_max_restarts(operator, kubectl, wait_until):
    kubectl.apply(pool_job("doomed", pod_annotations={"longctx.io/fail": "true", "longctx.io/exit-code": "3"}))
    failed = h.wait_phase(kubectl, wait_until, "doomed", "Failed")
    status = failed["status"]
    assert (status["reason"], status["restarts"], status["workloadGeneration"]) == (reasons.RANK_FAILED, 1, 2)
    assert "rank 0 (pod doomed-g2-0-" in status["message"]
    assert "container trainer terminated: Error, exit code 3" in status["message"]
    assert "maxRestarts is 1" in status["message"]
    assert h.conditions(failed)[cond.FAILED] == ("True", reasons.RANK_FAILED)
    wait_until(lambda: not h.children(kubectl, "doomed")["jobs"], timeout=30, what="failed workload deleted")
    h.wait_event(kubectl, wait_until, "doomed", "Warning", reasons.RANK_FAILED)


def test_startup_timeout_is_a_failure_with_its_own_reason(operator, kubectl, wait_until):
    """A node selector no node has: admission none creates the gang, its pods never run."""
    kubectl.apply(
        h.job_manifest(
            "stuck",
            scheduling={
                "admission": "none",
                "startupTimeoutSeconds": 10,
                "nodeSelector": {"longctx.io/no-such-pool": "x"},
            },
            restartPolicy={"maxRestarts": 0},
        )
    )
    failed = h.wait_phase(kubectl, wait_until, "stuck", "Failed", timeout=60)
    assert failed["status"]["reason"] == reasons.STARTUP_TIMEOUT
    assert "0 of 2 ranks Running after 10s" in failed["status"]["message"]


def test_a_workload_the_api_server_refuses_is_reported_then_times_out(operator, kubectl, wait_until):
    """A ResourceQuota that allows no Jobs: the API server's quota admission refuses the gang."""
    kubectl.run("create", "quota", "no-jobs", "--hard=count/jobs.batch=0")
    wait_until(
        lambda: kubectl.json("get", "quota", "no-jobs").get("status", {}).get("hard"),
        timeout=30,
        what="the quota controller to fill in the quota's status",
    )
    kubectl.apply(
        h.job_manifest(
            "refused", scheduling={"admission": "none", "startupTimeoutSeconds": 10}, restartPolicy={"maxRestarts": 0}
        )
    )

    def reported():
        obj = kubectl.json("get", "longcontextjob", "refused")
        refusal = ("False", reasons.WORKLOAD_CREATE_FAILED)
        return obj if h.conditions(obj).get(cond.WORKLOAD_CREATED) == refusal else None

    status = wait_until(reported, timeout=30, what="the refusal in the status")["status"]
    assert (status["phase"], status["reason"]) == ("Admitted", reasons.WORKLOAD_CREATE_FAILED)
    assert "403 Forbidden" in status["message"] and "exceeded quota: no-jobs" in status["message"]
    failed = h.wait_phase(kubectl, wait_until, "refused", "Failed", timeout=90)["status"]
    assert failed["reason"] == reasons.STARTUP_TIMEOUT
    assert "the workload was not created within 10s" in failed["message"]
    assert "count/jobs.batch" in failed["message"]
    warnings = [e for e in h.event_objects(kubectl, "refused") if e["type"] == "Warning"]
    assert [e["reason"] for e in warnings] == [
        reasons.CHECKPOINT_NOT_PERSISTENT,
        reasons.WORKLOAD_CREATE_FAILED,
        reasons.STARTUP_TIMEOUT,
    ]
    assert h.children(kubectl, "refused")["jobs"] == []


def colleagues_job(workloads, name: str, labels: dict | None = None, **spec) -> dict:
    """A plain batch Job someone else made in the namespace, on this module's nodes: no owner
    reference to any LongContextJob."""
    job = workloads.gpu_indexed_job(name, 1, annotations={"longctx.io/complete-after": "1s"})
    job["metadata"]["labels"] = labels or {}
    job["spec"] |= spec
    job["spec"]["template"]["spec"]["nodeSelector"][h.POOL_LABEL] = POOL
    return job


def test_a_colleagues_job_named_like_a_generation_fails_the_job_and_is_never_deleted(
    operator, kubectl, wait_until, workloads
):
    """The name of generation 1 is taken: the job fails at once with reason NameTaken; the
    colleague's Job is neither deleted (not at the startup timeout, not by a next generation) nor
    changed."""
    kubectl.apply(colleagues_job(workloads, "squat-g1", suspend=True))
    theirs = kubectl.json("get", "job", "squat-g1")["metadata"]["uid"]
    kubectl.apply(
        pool_job(
            "squat", scheduling={"admission": "none", "startupTimeoutSeconds": 10}, restartPolicy={"maxRestarts": 1}
        )
    )
    failed = h.wait_phase(kubectl, wait_until, "squat", "Failed", timeout=60)
    status = failed["status"]
    assert (status["reason"], status["restarts"]) == (reasons.NAME_TAKEN, 0)
    assert "Job squat-g1 already exists and is not owned by LongContextJob squat" in status["message"]
    assert h.conditions(failed)[cond.WORKLOAD_CREATED] == ("False", reasons.NAME_TAKEN)
    h.wait_event(kubectl, wait_until, "squat", "Warning", reasons.NAME_TAKEN)
    jobs = {j["metadata"]["name"]: j for j in kubectl.json("get", "jobs")["items"]}
    assert set(jobs) == {"squat-g1"} and jobs["squat-g1"]["metadata"]["uid"] == theirs
    assert not jobs["squat-g1"]["metadata"].get("deletionTimestamp")


def test_a_completed_job_merely_labelled_with_the_jobs_name_is_not_taken_as_its_own(
    operator, kubectl, wait_until, workloads
):
    """A colleague's completed Job named and labelled like generation 1 (longctx.io/job-name,
    longctx.io/generation) but not owned by the job: it does not make the job Succeeded without
    running; the job fails with NameTaken and the Job stays."""
    labels = {"longctx.io/job-name": "mimic", "longctx.io/generation": "1"}
    kubectl.apply(colleagues_job(workloads, "mimic-g1", labels))
    wait_until(
        lambda: any(
            c["type"] == "Complete" and c["status"] == "True"
            for c in kubectl.json("get", "job", "mimic-g1")["status"].get("conditions", [])
        ),
        timeout=60,
        what="the colleague's Job to complete",
    )
    theirs = kubectl.json("get", "job", "mimic-g1")["metadata"]["uid"]
    kubectl.apply(pool_job("mimic", scheduling={"admission": "none"}))
    failed = h.wait_phase(kubectl, wait_until, "mimic", "Failed", timeout=60)
    assert failed["status"]["reason"] == reasons.NAME_TAKEN
    assert "workers" not in failed["status"] and cond.SUCCEEDED not in h.conditions(failed)
    assert kubectl.json("get", "job", "mimic-g1")["metadata"]["uid"] == theirs


@pytest.fixture
def gpu_pool(admin_kubectl, namespace):
    """Adds simulated GPU nodes of this test's own pool on request; removes them afterwards."""
    names: list[str] = []

    def add(count: int) -> list[str]:
        names.extend(added := h.add_pool_nodes(admin_kubectl, namespace, count=count))
        return added

    yield add
    h.delete_nodes(admin_kubectl, names)


def test_not_enough_gpus_stays_pending_then_starts_when_nodes_are_added(
    operator, kubectl, wait_until, namespace, gpu_pool
):
    kubectl.apply(h.job_manifest("waiting", pool=namespace, pod_annotations=FAST))
    pending = h.wait_phase(kubectl, wait_until, "waiting", "Pending", timeout=30)
    assert pending["status"]["reason"] == reasons.INSUFFICIENT_GPUS
    assert "needs 2 nodes with 8 free nvidia.com/gpu" in pending["status"]["message"]
    assert h.conditions(pending)[cond.ADMITTED] == ("False", reasons.INSUFFICIENT_GPUS)
    assert h.children(kubectl, "waiting") == {"services": [], "configmaps": [], "jobs": [], "pods": []}
    added = gpu_pool(2)
    done = h.wait_phase(kubectl, wait_until, "waiting", "Succeeded", timeout=90)
    assert h.conditions(done)[cond.ADMITTED] == ("True", reasons.GANG_FITS)
    nodes = {p["spec"]["nodeName"] for p in kubectl.pods("longctx.io/job-name=waiting")}
    assert nodes == set(added)


def test_suspend_then_resume_runs_the_next_generation(operator, kubectl, wait_until):
    kubectl.apply(pool_job("pausable", pod_annotations={"longctx.io/keep-running": "true"}))
    h.wait_phase(kubectl, wait_until, "pausable", "Running")
    kubectl.run("patch", "lcj", "pausable", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    h.wait_phase(kubectl, wait_until, "pausable", "Suspended", timeout=30)
    wait_until(
        lambda: h.children(kubectl, "pausable")["jobs"] == [] and not kubectl.pods("longctx.io/job-name=pausable"),
        timeout=30,
        what="workload deleted",
    )
    kubectl.run("patch", "lcj", "pausable", "--type=merge", "-p", '{"spec":{"suspend":false}}')
    resumed = h.wait_phase(kubectl, wait_until, "pausable", "Running", timeout=60)
    assert (resumed["status"]["workloadGeneration"], resumed["status"]["restarts"]) == (2, 0)
    assert h.children(kubectl, "pausable")["jobs"] == ["pausable-g2"]
    assert h.conditions(resumed)[cond.SUSPENDED] == ("False", reasons.RESUMED)


def test_delete_removes_every_child(operator, kubectl, wait_until):
    kubectl.apply(pool_job("doomed-by-user", pod_annotations={"longctx.io/keep-running": "true"}))
    h.wait_phase(kubectl, wait_until, "doomed-by-user", "Running")
    kids = h.children(kubectl, "doomed-by-user")
    assert len(kids["jobs"]) == 1 and len(kids["pods"]) == 2 and kids["services"] and kids["configmaps"]
    kubectl.run("delete", "lcj", "doomed-by-user", "--wait=true", "--timeout=30s")
    wait_until(
        lambda: not any(h.children(kubectl, "doomed-by-user").values()), timeout=60, what="children garbage-collected"
    )


def test_immutable_fields_are_rejected_by_the_api_server(operator, kubectl, wait_until):
    kubectl.apply(pool_job("fixed", pod_annotations={"longctx.io/keep-running": "true"}))
    h.wait_phase(kubectl, wait_until, "fixed", "Running")
    proc = kubectl.run(
        "patch", "lcj", "fixed", "--type=merge", "-p", '{"spec":{"model":{"preset":"125m"}}}', check=False
    )
    assert proc.returncode != 0 and "model is immutable" in proc.stderr
    kubectl.run("patch", "lcj", "fixed", "--type=merge", "-p", '{"spec":{"steps":20}}')  # mutable
    obj = wait_until(
        lambda: (o := kubectl.json("get", "lcj", "fixed"))["status"].get("observedGeneration") == 2 and o,
        timeout=30,
        what="the change observed",
    )
    assert obj["status"]["workloadGeneration"] == 1 and obj["status"]["phase"] == "Running"


def test_live_progress_from_a_real_exporter(operator, kubectl, wait_until):
    with stepping_exporter("progress") as metrics_url:
        kubectl.apply(
            pool_job(
                "progress",
                steps=100_000,
                pod_annotations={"longctx.io/keep-running": "true"},
                annotations={"longctx.io/metrics-url": metrics_url},
            )
        )
        first = wait_until(
            lambda: ((kubectl.json("get", "lcj", "progress").get("status") or {}).get("progress") or {}).get("step"),
            timeout=60,
            what="status.progress",
        )
        later = wait_until(
            lambda: (p := kubectl.json("get", "lcj", "progress")["status"]["progress"])["step"] > first and p,
            timeout=30,
            what="progress advancing",
        )
        assert later["tokensPerSecond"] == pytest.approx(8192.0)
        assert later["mfu"] == pytest.approx(0.25)
        assert later["loss"] == pytest.approx(10.0 / later["step"], rel=0.3)
        assert later["lastCheckpointStep"] % 5 == 0 and later["lastCheckpointStep"] <= later["step"]
        assert later["updatedAt"].endswith("Z")
        assert later["percentComplete"] == pytest.approx(round(100 * later["step"] / 100_000, 1))
        assert later["eta"] and later["estimatedCompletionTime"].endswith("Z")  # two reads, step moved
        header, row = kubectl.run("get", "lcj", "progress").stdout.splitlines()
        eta = row[header.index("ETA") : header.index("RESTARTS")].strip()
        done = row[header.index("DONE %") : header.index("ETA")].strip()
        assert re.fullmatch(r"(\d+[dhms])+", eta), row  # e.g. 3h12m
        assert float(done) == pytest.approx(100 * later["step"] / 100_000, abs=0.2) and "8192" in row


def _operator_metrics(operator) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics", timeout=5) as r:
        text = r.read().decode()
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("longctx_operator_")
    }


def test_operator_metrics_count_reconciles_restarts_and_phases(operator, kubectl, wait_until):
    before = _operator_metrics(operator)
    kubectl.apply(pool_job("counted", pod_annotations={"longctx.io/fail": "true"}))
    h.wait_phase(kubectl, wait_until, "counted", "Failed")
    # The phase gauge follows the operator's status write once the write returns: the job may be
    # seen Failed a moment before.
    after = wait_until(
        lambda: (m := _operator_metrics(operator)).get('longctx_operator_jobs{phase="Failed"}', 0) >= 1 and m,
        timeout=30,
        what="the Failed phase counted",
    )
    restarts = f'longctx_operator_gang_restarts_total{{job_name="counted",namespace="{kubectl.namespace}"}}'
    assert after.get(restarts) == 1 and before.get(restarts, 0) == 0, [k for k in after if "gang" in k]
    assert after['longctx_operator_reconciles_total{result="ok"}'] > before.get(
        'longctx_operator_reconciles_total{result="ok"}', 0
    )
    assert (
        after["longctx_operator_admission_wait_seconds_count"]
        >= before.get("longctx_operator_admission_wait_seconds_count", 0) + 2
    )
    assert after["longctx_operator_reconcile_duration_seconds_count"] > 0
    assert after['longctx_operator_api_requests_total{verb="post"}'] > before.get(
        'longctx_operator_api_requests_total{verb="post"}', 0
    )


def test_restricted_namespace_runs_tcp_jobs_and_refuses_rdma_ones(operator, kubectl, wait_until, namespace):
    """Pod Security Admission "restricted" (docs/security.md): the pods of a tcp job pass it (non-root,
    no privilege escalation, every capability dropped, RuntimeDefault seccomp); an InfiniBand job
    needs IPC_LOCK, so its pods are refused and its workload reports why."""
    kubectl.run("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted", "--overwrite")
    kubectl.apply(pool_job("plain-tcp", pod_annotations=FAST))
    h.wait_phase(kubectl, wait_until, "plain-tcp", "Succeeded")
    kubectl.apply(pool_job("needs-rdma", network={"fabric": "infiniband"}, pod_annotations=FAST))
    refused = wait_until(
        lambda: [
            e["message"]
            for e in kubectl.json(
                "get", "events", "--field-selector", "involvedObject.kind=Job,involvedObject.name=needs-rdma-g1"
            )["items"]
            if e["reason"] == "FailedCreate"
        ],
        timeout=60,
        what="the Job controller refused the RDMA pods",
    )
    assert any('violates PodSecurity "restricted' in message and "IPC_LOCK" in message for message in refused), refused
    assert not kubectl.pods("longctx.io/job-name=needs-rdma")


def test_pod_annotations_outside_the_allow_list_hold_the_job_with_a_reason(operator, kubectl, wait_until):
    """The test operator allows longctx.io/* only: a Multus network of another namespace is refused,
    no workload is created, and the job says why until the annotation is fixed."""
    kubectl.apply(pool_job("sneaky", pod_annotations={"k8s.v1.cni.cncf.io/networks": "kube-system/host-net"}))
    held = wait_until(
        lambda: (
            (obj := kubectl.json("get", "lcj", "sneaky"))
            and h.conditions(obj).get(cond.POD_ANNOTATIONS_ACCEPTED, (None,))[0] == "False"
            and obj
        ),
        timeout=30,
        what="PodAnnotationsAccepted False",
    )
    assert held["status"]["phase"] == "Pending"
    assert h.conditions(held)[cond.POD_ANNOTATIONS_ACCEPTED] == ("False", reasons.POD_ANNOTATIONS_REJECTED)
    assert "k8s.v1.cni.cncf.io/networks" in next(
        c["message"] for c in held["status"]["conditions"] if c["type"] == cond.POD_ANNOTATIONS_ACCEPTED
    )
    assert not h.children(kubectl, "sneaky")["jobs"]
    h.wait_event(kubectl, wait_until, "sneaky", "Warning", reasons.POD_ANNOTATIONS_REJECTED)
    kubectl.run("annotate", "lcj", "sneaky", "--overwrite", f"longctx.io/pod-annotations={json.dumps(FAST)}")
    h.wait_phase(kubectl, wait_until, "sneaky", "Succeeded")


def test_a_toleration_outside_the_allow_list_holds_the_job_with_a_reason(operator, kubectl, wait_until):
    """The test operator allows tolerating nvidia.com/gpu only: a job tolerating the control plane's
    taint is held Pending (SettingNotAllowed) with nothing created, and runs once the spec drops it."""
    control_plane = {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}
    kubectl.apply(pool_job("greedy", scheduling={"tolerations": [control_plane]}, pod_annotations=FAST))
    held = wait_until(
        lambda: (
            (obj := kubectl.json("get", "lcj", "greedy"))
            and (obj.get("status") or {}).get("reason") == reasons.SETTING_NOT_ALLOWED
            and obj
        ),
        timeout=30,
        what="reason SettingNotAllowed",
    )
    assert held["status"]["phase"] == "Pending"
    assert "spec.scheduling.tolerations[0].key node-role.kubernetes.io/control-plane" in held["status"]["message"]
    assert h.conditions(held)[cond.ADMITTED] == ("False", reasons.SETTING_NOT_ALLOWED)
    assert not h.children(kubectl, "greedy")["jobs"]
    h.wait_event(kubectl, wait_until, "greedy", "Warning", reasons.SETTING_NOT_ALLOWED)
    remove = '[{"op": "remove", "path": "/spec/scheduling/tolerations"}]'
    kubectl.run("patch", "lcj", "greedy", "--type=json", "-p", remove)
    h.wait_phase(kubectl, wait_until, "greedy", "Succeeded")


def test_a_network_outside_the_allow_list_holds_the_job_until_the_spec_changes(operator, kubectl, wait_until):
    """The default networkAllowList allows no secondary network: the job is held Pending with
    NetworkNotAllowed and nothing is created; dropping the network admits it. Its gang is fenced by
    a NetworkPolicy the job owns, which the API server accepts as rendered."""
    kubectl.apply(pool_job("far-net", network={"fabric": "infiniband", "networks": ["ib-0"]}, pod_annotations=FAST))
    held = wait_until(
        lambda: (
            (obj := kubectl.json("get", "lcj", "far-net"))
            and h.conditions(obj).get(cond.ADMITTED, (None,))[0] == "False"
            and obj
        ),
        timeout=30,
        what="Admitted False",
    )
    assert (held["status"]["phase"], held["status"]["reason"]) == ("Pending", reasons.NETWORK_NOT_ALLOWED)
    assert held["status"]["message"].startswith('spec.network.networks[0]: "ib-0" is not allowed in namespace')
    assert not h.children(kubectl, "far-net")["jobs"]
    h.wait_event(kubectl, wait_until, "far-net", "Warning", reasons.NETWORK_NOT_ALLOWED)
    kubectl.run("patch", "lcj", "far-net", "--type=merge", "-p", '{"spec":{"network":{"networks":null}}}')
    h.wait_phase(kubectl, wait_until, "far-net", "Succeeded")
    policy = kubectl.json("get", "networkpolicy", "far-net")
    [owner] = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("LongContextJob", "far-net", held["metadata"]["uid"])
    gang = {"matchLabels": {"longctx.io/job-name": "far-net"}}
    assert policy["spec"]["podSelector"] == gang
    assert policy["spec"]["ingress"][0] == {"from": [{"podSelector": gang}]}
    assert policy["spec"]["ingress"][1]["from"] == [{"podSelector": {"matchLabels": READER}}]


INJECTIONS = [
    "x\n      securityContext: {privileged: true}",
    "x\r\n  hostPID: true",
    "x\x85hostNetwork: true",
    "x\u2028serviceAccountName: admin",
    "true",
    "[a, b]",
    "!!binary aGk=",
    "&a x",
    "x #y",
    "---\nkind: ClusterRoleBinding\nmetadata: {namespace: kube-system}",
]


def test_hostile_strings_are_refused_by_the_api_server_or_arrive_verbatim(operator, kubectl, wait_until):
    """Payloads through each string field a job author writes: the API server refuses those its
    schema forbids (naming the field); the rest reach the pods exactly as written and change nothing
    else (no privilege, host namespace or service account appears)."""
    fields = {  # field -> (spec overrides with the payload, where it must arrive in the pod template)
        "spec.image": (lambda v: {"image": v}, lambda pod: pod["containers"][0]["image"]),
        "spec.scheduling.priorityClassName": (
            lambda v: {"scheduling": {"priorityClassName": v}},
            lambda pod: pod["priorityClassName"],
        ),
        "spec.env[0].value": (
            lambda v: {"env": [{"name": "NOTE", "value": v}]},
            lambda pod: next(e["value"] for e in pod["containers"][0]["env"] if e["name"] == "NOTE"),
        ),
        "spec.checkpoint.path": (
            lambda v: {"checkpoint": {"path": "/ckpt/" + v, "persistentVolumeClaim": "ckpt"}},
            lambda pod: next(
                m["mountPath"] for m in pod["containers"][0]["volumeMounts"] if m["name"] == "checkpoints"
            )[len("/ckpt/") :],
        ),
    }
    accepted = 0
    for index, payload in enumerate(INJECTIONS):
        for field, (spec_of, arrived) in fields.items():
            name = f"inject-{index}-{list(fields).index(field)}"
            overrides = spec_of(payload)
            overrides.setdefault("scheduling", {})["admission"] = "none"  # the Job is what is checked
            manifest = pool_job(name, **overrides)
            result = kubectl.run("apply", "-f", "-", input=json.dumps(manifest), check=False)
            if result.returncode != 0:
                assert field.split("[")[0] in result.stderr, (field, payload, result.stderr)
                continue
            accepted += 1
            job = wait_until(
                lambda name=name: kubectl.json("get", "jobs", "-l", f"longctx.io/job-name={name}")["items"],
                timeout=30,
                what=f"{name}'s workload",
            )[0]
            pod = job["spec"]["template"]["spec"]
            assert arrived(pod) == payload
            assert "serviceAccountName" not in pod and not pod.get("hostPID") and not pod.get("hostNetwork")
            assert not pod["containers"][0]["securityContext"].get("privileged")
            assert job["metadata"]["namespace"] == kubectl.namespace
            kubectl.run("delete", "lcj", name, "--wait=false")
    assert accepted >= len(INJECTIONS)  # free-text fields took every payload verbatim
