"""What the watch streams delivered, trimmed to the fields the operator reads.

Filled by the kopf event handlers on the event loop; the reconciler reads it instead of listing,
so a reconciliation costs no read requests. Objects are plain dicts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .names import GENERATION_LABEL, JOB_NAME_LABEL

Key = tuple[str, str]  # (namespace, LongContextJob name)


def _resource_version(obj: dict) -> int:
    try:
        return int(obj["metadata"].get("resourceVersion") or 0)
    except ValueError:
        return 0


def trim_pod(pod: dict) -> dict:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    return {
        "metadata": {
            k: meta.get(k)
            for k in ("name", "namespace", "uid", "labels", "annotations", "deletionTimestamp", "creationTimestamp")
        },
        "spec": {
            "nodeName": spec.get("nodeName"),
            "containers": [
                {"name": c.get("name"), "resources": c.get("resources") or {}} for c in spec.get("containers") or []
            ],
        },
        "status": {
            k: status.get(k) for k in ("phase", "conditions", "containerStatuses", "podIP", "reason", "message")
        },
    }


def trim_node(node: dict) -> dict:
    meta, spec, status = node.get("metadata", {}), node.get("spec", {}), node.get("status", {})
    return {
        "metadata": {"name": meta.get("name"), "labels": meta.get("labels") or {}},
        "spec": {"taints": spec.get("taints") or [], "unschedulable": spec.get("unschedulable")},
        "status": {
            "allocatable": status.get("allocatable") or {},
            "conditions": [c for c in status.get("conditions") or [] if c.get("type") == "Ready"],
        },
    }


def trim_job(job: dict) -> dict:
    meta = job.get("metadata", {})
    return {
        "metadata": {
            k: meta.get(k) for k in ("name", "namespace", "uid", "labels", "deletionTimestamp", "creationTimestamp")
        },
        "spec": {k: job.get("spec", {}).get(k) for k in ("completions", "parallelism", "suspend")},
        "status": job.get("status") or {},
    }


def trim_kueue_workload(workload: dict) -> dict:
    return {
        "metadata": {"name": workload["metadata"].get("name")},
        "status": {"conditions": (workload.get("status") or {}).get("conditions") or []},
    }


def _owner_job(obj: dict) -> str | None:
    """The name of the batch Job that owns `obj` (Kueue's Workload of that Job), if any."""
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("apiVersion", "").startswith("batch/"):
            return ref.get("name")
    return None


def _put_owned(store: dict, obj: dict, deleted: bool, trim) -> Key | None:
    """Stores (trimmed) or drops a Job or pod; returns the LongContextJob that owns it, if any."""
    key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
    if deleted:
        store.pop(key, None)
    else:
        store[key] = trim(obj)
    owner = (obj["metadata"].get("labels") or {}).get(JOB_NAME_LABEL)
    return (key[0], owner) if owner else None


@dataclass
class Cache:
    jobs_of: dict[Key, dict] = field(default_factory=dict)  # LongContextJobs
    workloads: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, Job name) -> Job
    pods: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, pod name) -> pod
    kueue_workloads: dict[tuple[str, str], dict] = field(default_factory=dict)  # (ns, Job name) -> Kueue's
    nodes: dict[str, dict] = field(default_factory=dict)

    def put_job(self, obj: dict, deleted: bool) -> None:
        """A LongContextJob; keeps the newest of the watched and our own patched copies."""
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        if deleted:
            self.jobs_of.pop(key, None)
        elif key not in self.jobs_of or _resource_version(obj) >= _resource_version(self.jobs_of[key]):
            self.jobs_of[key] = obj

    def put_workload(self, obj: dict, deleted: bool) -> Key | None:
        return _put_owned(self.workloads, obj, deleted, trim_job)

    def put_kueue_workload(self, obj: dict, deleted: bool) -> Key | None:
        """Kueue's Workload, stored under the Job it admits; returns that Job's LongContextJob."""
        job = _owner_job(obj)
        if job is None:
            return None
        key = (obj["metadata"]["namespace"], job)
        if not deleted:
            self.kueue_workloads[key] = trim_kueue_workload(obj)
        elif (self.kueue_workloads.get(key) or {}).get("metadata", {}).get("name") == obj["metadata"].get("name"):
            del self.kueue_workloads[key]  # not a newer Workload Kueue made for the same Job
        owner = ((self.workloads.get(key) or {}).get("metadata", {}).get("labels") or {}).get(JOB_NAME_LABEL)
        return (key[0], owner) if owner else None

    def put_pod(self, obj: dict, deleted: bool) -> Key | None:
        return _put_owned(self.pods, obj, deleted, trim_pod)

    def put_node(self, obj: dict, deleted: bool) -> None:
        if deleted:
            self.nodes.pop(obj["metadata"]["name"], None)
        else:
            self.nodes[obj["metadata"]["name"]] = trim_node(obj)

    def generation_pods(self, key: Key, generation: int) -> list[dict]:
        namespace, name = key
        return [
            p
            for (ns, _), p in self.pods.items()
            if ns == namespace
            and (p["metadata"].get("labels") or {}).get(JOB_NAME_LABEL) == name
            and (p["metadata"].get("labels") or {}).get(GENERATION_LABEL) == str(generation)
        ]
