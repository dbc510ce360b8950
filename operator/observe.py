"""What one workload generation looks like right now: its Indexed Job and pods -> ranks and failures.

Pure functions over the API objects as plain dicts (what the watch streams deliver), so the
lifecycle can be tested without a cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from .names import COMPLETION_INDEX_LABEL


def controller_of(obj: dict) -> dict | None:
    """The ownerReference that marks `obj`'s controller, if any (the object that created it, as the
    API server records it: a name alone says nothing about who made an object)."""
    return next((ref for ref in obj.get("metadata", {}).get("ownerReferences") or [] if ref.get("controller")), None)


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 timestamp as the API server writes it (e.g. 2026-01-02T03:04:05Z)."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(frozen=True)
class RankFailure:
    """The first failed rank of a gang (lowest index) and why it ended."""

    rank: int | None
    pod: str | None
    reason: str
    node_lost: bool = False
    """Its node is lost (lost_node): the gang restarts at once, on other nodes."""

    def describe(self) -> str:
        who = f"rank {self.rank} (pod {self.pod})" if self.rank is not None else "the workload"
        return f"{who} failed: {self.reason}"


KUEUE_MESSAGE_MAX = 1000
"""Kueue's message is cut to this many characters (one per flavor and resource can grow long;
the job's status message holds 4096)."""


@dataclass(frozen=True)
class KueueVerdict:
    """What Kueue's Workload for the Job says, in Kueue's own words: why it is not admitted
    (QuotaReserved False) or why it was evicted (Evicted True)."""

    evicted: bool
    reason: str
    message: str

    def describe(self) -> str:
        return f"{self.reason}: {self.message}" if self.message else self.reason


def kueue_verdict(workload: dict | None) -> KueueVerdict | None:
    """Kueue's reason from its Workload's conditions; None when it has said nothing yet (or the
    Workload is unknown: Kueue's Workloads are watched only where the configuration says so)."""
    if workload is None:
        return None
    conditions = {c.get("type"): c for c in (workload.get("status") or {}).get("conditions") or []}
    for kind, status, evicted in (("Evicted", "True", True), ("QuotaReserved", "False", False)):
        c = conditions.get(kind)
        if c is not None and c.get("status") == status:
            message = " ".join((c.get("message") or "").split())
            if len(message) > KUEUE_MESSAGE_MAX:
                message = message[: KUEUE_MESSAGE_MAX - 3] + "..."
            return KueueVerdict(evicted, c.get("reason") or kind, message)
    return None


@dataclass(frozen=True)
class LostPod:
    """A pod on a lost node: deleted with no grace period once `overdue` has passed (its graceful
    deletion's deadline, metadata.deletionTimestamp), since no kubelet will confirm its end; a live
    kubelet (a NoExecute taint of another kind) has until then to stop it gracefully."""

    name: str
    overdue: datetime | None


@dataclass(frozen=True)
class WorkloadObservation:
    """The ranks of one generation. `exists` is False when its Job is not (or no longer) there;
    `create_error` then says why the API server refused to create it the last time, and
    `name_taken` that the refusal is for good: a child's name belongs to an object this job does
    not own. `uid` is the Job's (a delete names it, so it can only ever delete this Job)."""

    exists: bool
    create_error: str | None = None
    name_taken: bool = False
    uid: str | None = None
    deleting: bool = False
    suspended: bool = False
    created: datetime | None = None
    total: int = 0
    running: int = 0
    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    complete: bool = False
    failure: RankFailure | None = None
    kueue: KueueVerdict | None = None
    lost_pods: tuple[LostPod, ...] = ()
    """Pods on a lost node (lost_node)."""

    @property
    def all_running(self) -> bool:
        return self.total > 0 and self.running == self.total

    @property
    def all_ready(self) -> bool:
        return self.total > 0 and self.ready == self.total


MISSING = WorkloadObservation(exists=False)


def pod_rank(pod: dict) -> int | None:
    meta = pod.get("metadata", {})
    index = (meta.get("labels") or {}).get(COMPLETION_INDEX_LABEL) or (meta.get("annotations") or {}).get(
        COMPLETION_INDEX_LABEL
    )
    return int(index) if index is not None and str(index).isdigit() else None


def _condition(obj: dict, kind: str) -> dict | None:
    for c in obj.get("status", {}).get("conditions") or []:
        if c.get("type") == kind and c.get("status") == "True":
            return c
    return None


TAINT_EVICTION = "DeletionByTaintManager"
"""The DisruptionTarget reason of a pod the taint manager evicts: its node became NotReady or
unreachable (the node.kubernetes.io/not-ready and unreachable NoExecute taints) and the pod's
toleration of it ran out."""
NODE_LOST = "NodeLost"
"""The status reason the node lifecycle controller gives a pod deleted on an unreachable node."""


def lost_node(pod: dict) -> str | None:
    """Why the node of `pod` is lost, or None: the taint manager marked the pod for disruption
    (its node's NoExecute taint, not-ready or unreachable, outlasted the pod's toleration; the pod
    may still read Ready, as nothing updates it), or the node lifecycle controller gave it the
    NodeLost reason."""
    status = pod.get("status", {})
    if status.get("reason") == NODE_LOST:
        return status.get("message") or "its node is unreachable"
    target = _condition(pod, "DisruptionTarget")
    if target is not None and target.get("reason") == TAINT_EVICTION:
        node = pod.get("spec", {}).get("nodeName")
        return f"node {node} is NotReady or unreachable ({target.get('message') or TAINT_EVICTION})"
    return None


def exit_reason(pod: dict) -> str:
    """Why a failed pod ended: each terminated container's reason and exit code, else the pod's."""
    parts = []
    for c in pod.get("status", {}).get("containerStatuses") or []:
        term = (c.get("state") or {}).get("terminated")
        if term and term.get("exitCode", 0) != 0:
            parts.append(
                f"container {c.get('name')} terminated: {term.get('reason') or 'Error'}, "
                f"exit code {term.get('exitCode')}"
            )
    if parts:
        return "; ".join(parts)
    status = pod.get("status", {})
    return status.get("reason") or status.get("message") or "pod Failed"


def observe_workload(job: dict | None, pods: list[dict], kueue_workload: dict | None = None) -> WorkloadObservation:
    """Ranks of the Job `job` from `pods` (the pods of that generation; others must be filtered out:
    the cache returns only the Job and pods this job owns) and, for a Job Kueue manages, Kueue's
    verdict from its Workload `kueue_workload`."""
    if job is None:
        return MISSING
    spec = job.get("spec", {})
    meta = job.get("metadata", {})
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    phases = [p.get("status", {}).get("phase") for p in live]
    failed = sorted(
        (p for p in live if p.get("status", {}).get("phase") == "Failed"),
        key=lambda p: (pod_rank(p) is None, pod_rank(p) or 0),
    )
    failure = None
    lost = sorted(
        ((p, why) for p in pods if (why := lost_node(p)) is not None),
        key=lambda pw: (pod_rank(pw[0]) is None, pod_rank(pw[0]) or 0),
    )
    if lost:
        first, why = lost[0]
        failure = RankFailure(pod_rank(first), first["metadata"].get("name"), why, node_lost=True)
    elif failed:
        first = failed[0]
        failure = RankFailure(pod_rank(first), first["metadata"].get("name"), exit_reason(first))
    elif (cond := _condition(job, "Failed")) is not None:
        failure = RankFailure(None, None, f"Job failed: {cond.get('reason')}: {cond.get('message', '')}".rstrip(": "))
    ready = sum(1 for p in live if p.get("status", {}).get("phase") == "Running" and _condition(p, "Ready"))
    return WorkloadObservation(
        exists=True,
        uid=meta.get("uid"),
        deleting=bool(meta.get("deletionTimestamp")),
        suspended=bool(spec.get("suspend")),
        created=parse_time(meta.get("creationTimestamp")),
        total=int(spec.get("completions") or spec.get("parallelism") or 0),
        running=phases.count("Running"),
        ready=ready,
        succeeded=phases.count("Succeeded"),
        failed=len(failed),
        complete=_condition(job, "Complete") is not None,
        failure=failure,
        kueue=kueue_verdict(kueue_workload),
        lost_pods=tuple(
            LostPod(p["metadata"]["name"], parse_time(p["metadata"].get("deletionTimestamp"))) for p, _ in lost
        ),
    )
