"""What the watch streams delivered, trimmed to the fields the operator reads.

Filled by the kopf event handlers on the event loop; the reconciler reads it instead of listing,
so a reconciliation costs no read requests. Objects are plain dicts.

Ownership is the API server's record, never a name or a label (anyone in a namespace can name a
Job `<job>-g1` or label a pod with a job's name): a generation's Job is the job's only when its
controller ownerReference carries the LongContextJob's uid, and its pods only when theirs carries
that Job's uid (`owned_workload`, `generation_pods`, `generation_kueue_workload`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .names import KIND as LONGCONTEXTJOB_KIND
from .names import workload_name
from .observe import controller_of

Key = tuple[str, str]  # (namespace, LongContextJob name)


def _resource_version(obj: dict) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


def _controller(meta: dict) -> list[dict]:
    """The controller ownerReference alone, as `ownerReferences` (what controller_of reads)."""
    ref = controller_of({"metadata": meta})
    return [{k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}] if ref else []


def trim_pod(pod: dict) -> dict:
    """A pod; one not bound to a node yet keeps where it may go (node selector, required node
    affinity, tolerations), which builtin admission matches against free nodes."""
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    trimmed_spec = {
        "nodeName": spec.get("nodeName"),
        "containers": [
            {"name": c.get("name"), "resources": c.get("resources") or {}} for c in spec.get("containers") or []
        ],
    }
    if not spec.get("nodeName"):
        required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        trimmed_spec |= {
            "nodeSelector": spec.get("nodeSelector") or {},
            "tolerations": spec.get("tolerations") or [],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}
            if required
            else {},
        }
    return {
        "metadata": {
            k: meta.get(k)
            for k in ("name", "namespace", "uid", "labels", "annotations", "deletionTimestamp", "creationTimestamp")
        }
        | {"ownerReferences": _controller(meta)},
        "spec": trimmed_spec,
        "status": {
            k: status.get(k) for k in ("phase", "conditions", "containerStatuses", "podIP", "reason", "message")
        },
    }


def trim_node(node: dict) -> dict:
    """What builtin admission reads of a node; its Ready condition without the heartbeat times, so a
    node's status heartbeat leaves the trimmed node unchanged (Cache.put_node)."""
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    return {
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
        "spec": {"taints": spec.get("taints") or [], "unschedulable": spec.get("unschedulable")},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "conditions": [
                {"type": "Ready", "status": c.get("status")}
                for c in status.get("conditions") or []
                if c.get("type") == "Ready"
            ],
        },
    }


def trim_job(job: dict) -> dict:
    meta = job.get("metadata", {})
    return {
        "metadata": {
            k: meta.get(k) for k in ("name", "namespace", "uid", "labels", "deletionTimestamp", "creationTimestamp")
        }
        | {"ownerReferences": _controller(meta)},
        "spec": {k: job.get("spec", {}).get(k) for k in ("completions", "parallelism", "suspend")},
        "status": job.get("status") or {},
    }


def _owner_job(obj: dict) -> dict | None:
    """The ownerReference to the batch Job that owns `obj` (Kueue's Workload of that Job), if any."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("apiVersion", "").startswith("batch/"):
            return ref
    return None


def trim_kueue_workload(workload: dict) -> dict:
    return {
        "metadata": {"name": workload["metadata"].get("name"), "ownerReferences": [_owner_job(workload)]},
        "status": {"conditions": (workload.get("status") or {}).get("conditions") or []},
    }


def _controlled_by(obj: dict | None, kind: str, uid: str | None) -> bool:
    ref = controller_of(obj) if obj is not None else None
    return ref is not None and uid is not None and ref.get("kind") == kind and ref.get("uid") == uid


@dataclass
class Cache:
    jobs_of: dict[Key, dict] = field(default_factory=dict)  # LongContextJobs
    workloads: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, Job name) -> Job
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, pod name) -> pod
    kueue_workloads: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, Job name) -> Kueue's
    nodes: dict[str, dict] = field(default_factory=dict)
    pods_of: dict[tuple[str, str], dict[str, dict]] = field(default_factory=dict)
    """(ns, controller Job name) -> pod name -> pod: a generation's pods without scanning all pods."""

    def put_job(self, obj: dict, deleted: bool) -> None:
        """A LongContextJob; keeps the newest of the watched and our own patched copies."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if deleted:
            self.jobs_of.pop(key, None)
        elif key not in self.jobs_of or _resource_version(obj) >= _resource_version(self.jobs_of[key]):
            self.jobs_of[key] = obj

    def put_workload(self, obj: dict, deleted: bool) -> Key | None:
        """A batch Job; kept only when a LongContextJob is its controller (a Job merely labelled
        with a job's name is someone else's). Returns that LongContextJob."""
        owner = controller_of(obj)
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if owner is None or owner.get("kind") != LONGCONTEXTJOB_KIND:
            self.workloads.pop(key, None)  # no longer one of ours (its owner reference was removed)
            return None
        if deleted:
            self.workloads.pop(key, None)
        else:
            self.workloads[key] = trim_job(obj)
        return (key[0], owner.get("name"))

    def put_kueue_workload(self, obj: dict, deleted: bool) -> Key | None:
        """Kueue's Workload, stored under the Job it admits; returns that Job's LongContextJob."""
        job = _owner_job(obj)
        if job is None:
            return None
        key = (obj["metadata"]["namespace"], job.get("name"))
        if not deleted:
            self.kueue_workloads[key] = trim_kueue_workload(obj)
        elif (self.kueue_workloads.get(key) or {}).get("metadata", {}).get("name") == obj["metadata"].get("name"):
            del self.kueue_workloads[key]  # not a newer Workload Kueue made for the same Job
        return self._owner_of(key)

    def _owner_of(self, job: tuple[str, str]) -> Key | None:
        """The LongContextJob controlling the cached Job `job`, if any."""
        owner = controller_of(self.workloads[job]) if job in self.workloads else None
        return (job[0], owner.get("name")) if owner else None

    def put_pod(self, obj: dict, deleted: bool) -> Key | None:
        """A pod with the job-name label (watch.py), indexed by its controller Job; returns the
        LongContextJob controlling that Job, if it is cached."""
        namespace, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        old = self.pods.pop((namespace, name), None)
        if old is not None and (ref := controller_of(old)) is not None:
            self.pods_of.get((namespace, ref.get("name")), {}).pop(name, None)
        ref = controller_of(obj)
        job = (namespace, ref.get("name")) if ref is not None and ref.get("kind") == "Job" else None
        if not deleted:
            pod = self.pods[(namespace, name)] = trim_pod(obj)
            if job is not None:
                self.pods_of.setdefault(job, {})[name] = pod
        if job is not None and not self.pods_of.get(job, True):
            del self.pods_of[job]
        return self._owner_of(job) if job is not None else None

    def put_node(self, obj: dict, deleted: bool) -> bool:
        """Whether what admission reads of the node changed: a heartbeat (most node events) does not,
        and leaves the cached node object as it was (admission.NodeMatches keeps its verdict)."""
        name = obj["metadata"]["name"]
        if deleted:
            return self.nodes.pop(name, None) is not None
        trimmed = trim_node(obj)
        if self.nodes.get(name) == trimmed:
            return False
        self.nodes[name] = trimmed
        return True

    def owned_workload(self, key: Key, generation: int) -> dict | None:
        """The Job of `generation` when this LongContextJob (its uid) is its controller."""
        job = self.workloads.get((key[0], workload_name(key[1], generation)))
        owner_uid = (self.jobs_of.get(key) or {}).get("metadata", {}).get("uid")
        return job if _controlled_by(job, LONGCONTEXTJOB_KIND, owner_uid) else None

    def generation_pods(self, key: Key, generation: int) -> list[dict]:
        """The pods the generation's own Job (its uid) controls."""
        job = self.owned_workload(key, generation)
        if job is None:
            return []
        uid = job["metadata"].get("uid")
        pods = self.pods_of.get((key[0], job["metadata"]["name"]), {}).values()
        return [p for p in pods if _controlled_by(p, "Job", uid)]

    def generation_kueue_workload(self, key: Key, generation: int) -> dict | None:
        """Kueue's Workload of the generation's own Job (owned by that Job's uid)."""
        job = self.owned_workload(key, generation)
        if job is None:
            return None
        workload = self.kueue_workloads.get((key[0], job["metadata"]["name"]))
        owner = (workload or {}).get("metadata", {}).get("ownerReferences", [None])[0] or {}
        return workload if owner.get("uid") == job["metadata"].get("uid") else None
