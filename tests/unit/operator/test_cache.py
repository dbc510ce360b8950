"""The watch cache (operator/cache.py): what it keeps, and that a generation's Job, pods and Kueue
Workload are only ever those the API server records as this job's (controller ownerReference uid),
never objects that merely carry its name or labels."""

from longctx_operator.cache import Cache, trim_pod

LCJ_UID, JOB_UID = "lcj-uid", "j-g1-uid"
LABELS = {"longctx.io/job-name": "j", "longctx.io/generation": "1"}


def ref(kind: str, name: str, uid: str, controller: bool = True) -> dict:
    version = "batch/v1" if kind == "Job" else "longctx.io/v1alpha1"
    return {"apiVersion": version, "kind": kind, "name": name, "uid": uid, "controller": controller}


def batch_job(name="j-g1", uid=JOB_UID, owner=None, complete=False) -> dict:
    conditions = [{"type": "Complete", "status": "True"}] if complete else []
    return {
        "metadata": {
            "namespace": "n",
            "name": name,
            "uid": uid,
            "labels": dict(LABELS),
            "ownerReferences": [owner] if owner else [],
        },
        "spec": {"completions": 2},
        "status": {"conditions": conditions},
    }


def pod(name: str, owner: dict | None, phase="Running") -> dict:
    return {
        "metadata": {
            "namespace": "n",
            "name": name,
            "labels": dict(LABELS),
            "ownerReferences": [owner] if owner else [],
        },
        "spec": {"nodeName": "node-0"},
        "status": {"phase": phase},
    }


def cache_with_job() -> Cache:
    cache = Cache()
    cache.put_job({"metadata": {"namespace": "n", "name": "j", "uid": LCJ_UID, "generation": 1}}, deleted=False)
    return cache


def test_a_job_merely_labelled_or_named_like_a_generation_is_not_the_jobs():
    cache = cache_with_job()
    assert cache.put_workload(batch_job(complete=True), deleted=False) is None  # a colleague's, no owner
    assert cache.owned_workload(("n", "j"), 1) is None and not cache.workloads
    stale = batch_job(owner=ref("LongContextJob", "j", "earlier-uid"))  # an earlier job of that name
    assert cache.put_workload(stale, deleted=False) == ("n", "j")
    assert cache.owned_workload(("n", "j"), 1) is None
    not_controller = batch_job(owner=ref("LongContextJob", "j", LCJ_UID, controller=False))
    assert cache.put_workload(not_controller, deleted=False) is None
    assert cache.owned_workload(("n", "j"), 1) is None
    cache.put_workload(batch_job(owner=ref("LongContextJob", "j", LCJ_UID)), deleted=False)
    assert cache.owned_workload(("n", "j"), 1)["metadata"]["uid"] == JOB_UID
    cache.put_workload(batch_job(), deleted=False)  # its owner reference removed: no longer ours
    assert cache.owned_workload(("n", "j"), 1) is None and not cache.workloads


def test_a_generations_pods_are_only_those_its_own_job_controls():
    cache = cache_with_job()
    cache.put_workload(batch_job(owner=ref("LongContextJob", "j", LCJ_UID)), deleted=False)
    assert cache.put_pod(pod("rank-0", ref("Job", "j-g1", JOB_UID)), deleted=False) == ("n", "j")
    assert cache.put_pod(pod("labelled", None, phase="Failed"), deleted=False) is None
    cache.put_pod(pod("forged", ref("Job", "j-g1", "other-uid"), phase="Failed"), deleted=False)
    assert [p["metadata"]["name"] for p in cache.generation_pods(("n", "j"), 1)] == ["rank-0"]
    assert len(cache.pods) == 3  # every pod still counts for builtin admission
    cache.put_pod(pod("rank-0", ref("Job", "j-g1", JOB_UID)), deleted=True)
    assert cache.generation_pods(("n", "j"), 1) == [] and ("n", "rank-0") not in cache.pods
    assert cache.generation_pods(("n", "j"), 2) == []


def test_kueues_workload_counts_only_when_it_is_owned_by_the_generations_job():
    cache = cache_with_job()
    cache.put_workload(batch_job(owner=ref("LongContextJob", "j", LCJ_UID)), deleted=False)

    def kueue(name, reason, uid=JOB_UID):
        conditions = [{"type": "QuotaReserved", "status": "False", "reason": reason}]
        return {
            "metadata": {"namespace": "n", "name": name, "ownerReferences": [ref("Job", "j-g1", uid)]},
            "status": {"conditions": conditions},
        }

    assert cache.put_kueue_workload(kueue("forged", "Pending", uid="other-uid"), deleted=False) == ("n", "j")
    assert cache.generation_kueue_workload(("n", "j"), 1) is None
    assert cache.put_kueue_workload(kueue("job-j-g1-old", "Pending"), deleted=False) == ("n", "j")
    assert cache.put_kueue_workload(kueue("job-j-g1-new", "Inadmissible"), deleted=False) == ("n", "j")
    cache.put_kueue_workload(kueue("job-j-g1-old", "Pending"), deleted=True)  # a late delete of the old one
    assert cache.generation_kueue_workload(("n", "j"), 1)["status"]["conditions"][0]["reason"] == "Inadmissible"
    cache.put_kueue_workload(kueue("job-j-g1-new", "Inadmissible"), deleted=True)
    assert ("n", "j-g1") not in cache.kueue_workloads
    unowned = {"metadata": {"namespace": "n", "name": "w", "ownerReferences": []}, "status": {}}
    assert cache.put_kueue_workload(unowned, deleted=False) is None and len(cache.kueue_workloads) == 0


def test_cache_keeps_the_newest_copy_of_a_job():
    cache = Cache()
    newer = {"metadata": {"namespace": "n", "name": "j", "resourceVersion": "20"}, "status": {"phase": "Running"}}
    older = {"metadata": {"namespace": "n", "name": "j", "resourceVersion": "19"}, "status": {"phase": "Admitted"}}
    cache.put_job(newer, deleted=False)
    cache.put_job(older, deleted=False)
    assert cache.jobs_of[("n", "j")]["status"]["phase"] == "Running"
    cache.put_job(older, deleted=True)
    assert ("n", "j") not in cache.jobs_of


def test_an_unbound_pod_keeps_where_it_may_go_a_bound_one_does_not():
    required = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a"]}]}]}
    spec = {
        "nodeSelector": {"gpu": "h100"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}, "podAffinity": {}},
        "containers": [{"name": "c", "resources": {}}],
    }
    waiting = trim_pod({"metadata": {"name": "p"}, "spec": spec, "status": {}})["spec"]
    assert waiting["nodeSelector"] == {"gpu": "h100"} and waiting["tolerations"] == spec["tolerations"]
    assert waiting["affinity"] == {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
    bound = trim_pod({"metadata": {"name": "p"}, "spec": spec | {"nodeName": "n1"}, "status": {}})["spec"]
    assert set(bound) == {"nodeName", "containers"}
