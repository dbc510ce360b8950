"""What one workload generation looks like right now: its Indexed Job and pods -> ranks and failures.

Pure functions over the API objects as plain dicts (what the watch streams deliver), so the
lifecycle can be tested without a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from longctx_trainer.contract.termination import PREEMPTED_EXIT_CODE, PREEMPTED_MESSAGE

from .names import COMPLETION_INDEX_LABEL, TRAINER_CONTAINER


def controller_of(obj: dict) -> dict | None:
    """The ownerReference that marks `obj`'s controller, if any (the object that created it, as the
    API server records it: a name alone says nothing about who made an object)."""
    return next((ref for ref in obj.get("metadata", {}).get("ownerReferences") or [] if ref.get("controller")), None)


def timestamp(now: datetime) -> str:
    """`now` as the API server writes times (RFC 3339 in UTC, whole seconds); parse_time reads it back."""
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    requeue: str | None = None
    """Kueue's requeue backoff from the Workload's status.requeueState, e.g. "requeued 2 times,
    next at 2026-11-26T19:02:03Z" (the Job is kept across evictions, so the count grows)."""

    def describe(self) -> str:
        text = f"{self.reason}: {self.message}" if self.message else self.reason
        return f"{text} ({self.requeue})" if self.requeue else text


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
            return KueueVerdict(evicted, c.get("reason") or kind, message, _requeue(workload))
    return None


def _requeue(workload: dict) -> str | None:
    state = (workload.get("status") or {}).get("requeueState") or {}
    count = state.get("count")
    if not isinstance(count, int) or count < 1:
        return None
    at = parse_time(state.get("requeueAt")) if isinstance(state.get("requeueAt"), str) else None
    when = f", next at {at.strftime('%Y-%m-%dT%H:%M:%SZ')}" if at else ""
    return f"requeued {count} time{'s' if count > 1 else ''}{when}"


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
    preemption: RankPreemption | None = None
    """The last rank that ended preempted (it saved; not a failure: its pod is replaced)."""

    @property
    def all_running(self) -> bool:
        return self.total > 0 and self.running == self.total

    @property
    def all_ready(self) -> bool:
        return self.total > 0 and self.ready == self.total


MISSING = WorkloadObservation(exists=False)


POD_ENDED = ("Succeeded", "Failed")
"""The phases of a pod whose containers have all ended: it runs nothing and holds no GPU."""


def ended(pod: dict) -> bool:
    return pod.get("status", {}).get("phase") in POD_ENDED


def serving(pod: dict) -> bool:
    """Whether the pod can still be running its rank: not being deleted and not ended. A rank that
    ended preempted (exit 85) stays in the list, Failed, beside the pod the Job replaced it with."""
    return not pod.get("metadata", {}).get("deletionTimestamp") and not ended(pod)


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


_STEP = re.compile(re.escape(PREEMPTED_MESSAGE).replace(r"\{step\}", r"(\d{1,18})"))


def preempted_step(pod: dict) -> int | None:
    """The checkpoint step of a rank that ended preempted (its trainer exited PREEMPTED_EXIT_CODE),
    -1 when its termination message does not say; None for any other pod."""
    for c in pod.get("status", {}).get("containerStatuses") or []:
        term = (c.get("state") or {}).get("terminated") or {}
        if c.get("name") == TRAINER_CONTAINER and term.get("exitCode") == PREEMPTED_EXIT_CODE:
            match = _STEP.search(term.get("message") or "")
            return int(match.group(1)) if match else -1
    return None


@dataclass(frozen=True)
class RankPreemption:
    """The latest preempted rank of a generation: which, the step every rank saved (-1: unknown)
    and when its pod ended."""

    rank: int | None
    pod: str | None
    step: int
    finished: datetime | None

    def describe(self) -> str:
        saved = f"every rank saved step {self.step}" if self.step >= 0 else "the ranks saved a checkpoint"
        return f"rank {self.rank} (pod {self.pod}) was preempted: {saved}; the Job restarts its pods, which resume"


def latest_preemption(pods: list[dict]) -> RankPreemption | None:
    """The preempted rank that ended last among `pods` (one generation's), if any."""
    found = []
    for pod in pods:
        step = preempted_step(pod)
        if step is not None:
            found.append(RankPreemption(pod_rank(pod), pod.get("metadata", {}).get("name"), step, _finished(pod)))
    return max(found, key=lambda p: (p.finished or datetime.min.replace(tzinfo=UTC), p.step), default=None)


def _finished(pod: dict) -> datetime | None:
    for c in pod.get("status", {}).get("containerStatuses") or []:
        if c.get("name") == TRAINER_CONTAINER:
            return parse_time(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))
    return None


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
        (p for p in live if p.get("status", {}).get("phase") == "Failed" and preempted_step(p) is None),
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
        preemption=latest_preemption(pods),
    )
