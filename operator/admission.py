"""Gang admission: which way a job may be admitted (the operator's policy), and builtin admission:
does the whole gang fit on free GPUs of matching nodes right now?

A half-scheduled gang holds GPUs without training (JAX needs every rank), so the operator creates
nothing until every rank has a node: one pod per node (the renderer's anti-affinity), each node
matching the pod's node selector, its taints tolerated, and enough unrequested GPUs on it. GPU pods
waiting to be scheduled take such nodes first, but only those pods that could run on them (their
node selector, required node affinity and tolerations): a gang that can never be scheduled holds
no one else back. Pure functions over Node and Pod dicts; the reconciler runs `admit_gang` off the
event loop (it reads every node), over the jobs' own pods and the others' occupancy (occupancy.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from decimal import Decimal

from . import reasons
from .api.quantity import MULTIPLIERS
from .api.spec import LongContextJobSpec
from .config import OperatorConfig
from .node_memo import NodeMemo
from .observe import ended
from .reasons import Reason

BACKOFF_FIRST_SECONDS = 5.0
BACKOFF_MAX_SECONDS = 30.0

GPU = "nvidia.com/gpu"
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class GangRequest:
    pods: int
    gpus_per_pod: int
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)


@dataclass(frozen=True)
class Admission:
    fits: bool
    reason: Reason
    message: str
    available: int = 0
    """Nodes the gang could take when counted (its own included): a fit stands while nodes reserved
    for other gangs since then leave it enough."""


_SERVED_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"  # the number
    r"(?:([eE][+-]?[0-9]+)|("  # an exponent, or a suffix (the two-letter ones first)
    + "|".join(sorted(filter(None, MULTIPLIERS), key=len, reverse=True))
    + "))?"
)


_MOST_INT = 2**63 - 1  # the API server's quantities fit in an int64
_MOST = Decimal(_MOST_INT)


def quantity(value) -> int:
    """A GPU count as the API server serves it (None: 0). Extended resources such as nvidia.com/gpu
    are whole numbers, but in any form a quantity may take: "8", "1k", "2e3", "8000m". A form this
    cannot read (the API server serves none) counts as no GPUs rather than stopping admission."""
    if isinstance(value, str) and value.isascii() and value.isdigit():  # the common form, read fast
        return min(int(value), _MOST_INT)
    match = _SERVED_QUANTITY.fullmatch(str(value)) if value is not None else None
    if match is None:
        return 0
    number, exponent, suffix = match.groups()
    amount = Decimal(number + exponent) if exponent else Decimal(number) * MULTIPLIERS[suffix or ""]
    return int(min(max(amount, 0), _MOST))


def pod_gpus(pod: dict) -> int:
    """GPUs a pod holds: its containers' requests (limits when no request; they must be equal)."""
    total = 0
    for c in pod.get("spec", {}).get("containers") or []:
        res = c.get("resources") or {}
        total += quantity((res.get("requests") or {}).get(GPU, (res.get("limits") or {}).get(GPU)))
    return total


def tolerates(tolerations: list[dict], taint: dict) -> bool:
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t["key"] == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and (t.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def node_ready(node: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node.get("status", {}).get("conditions") or []
    )


def _expression_matches(expression: dict, values: dict) -> bool:
    """One node selector requirement (In, NotIn, Exists, DoesNotExist, Gt, Lt) against labels or fields."""
    key, operator, wanted = expression.get("key"), expression.get("operator"), expression.get("values") or []
    present, value = key in values, values.get(key)
    if operator == "In":
        return present and value in wanted
    if operator == "NotIn":
        return not present or value not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            have, bound = int(value), int(wanted[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False


def _term_matches(term: dict, node: dict) -> bool:
    """A nodeSelectorTerm: all its label and field requirements hold; an empty term matches nothing."""
    labels = node.get("metadata", {}).get("labels") or {}
    fields = {"metadata.name": node.get("metadata", {}).get("name")}
    expressions, field_expressions = term.get("matchExpressions") or [], term.get("matchFields") or []
    return bool(expressions or field_expressions) and (
        all(_expression_matches(e, labels) for e in expressions)
        and all(_expression_matches(e, fields) for e in field_expressions)
    )


def pod_constraints(pod: dict) -> list:
    """What of a pod pod_may_use reads: pods alike in it may use the same nodes (a gang's pods, and
    the gangs of one shape: their pod anti-affinity, which names the gang, is not read)."""
    spec = pod.get("spec", {})
    node_affinity = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    return [spec.get("nodeSelector"), required, spec.get("tolerations")]


def pod_may_use(pod: dict, node: dict) -> bool:
    """Whether the scheduler could put `pod` on `node`: its node selector, required node affinity
    and tolerations of the node's NoSchedule/NoExecute taints (resources aside)."""
    spec = pod.get("spec", {})
    labels = node.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
        return False
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    )
    if required and not any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
        return False
    return all(
        tolerates(spec.get("tolerations") or [], taint)
        for taint in node.get("spec", {}).get("taints") or []
        if taint.get("effect") in BLOCKING_EFFECTS
    )


def node_matches(node: dict, request: GangRequest) -> bool:
    labels = node.get("metadata", {}).get("labels") or {}
    if any(labels.get(k) != v for k, v in request.node_selector.items()):
        return False
    if node.get("spec", {}).get("unschedulable") or not node_ready(node):
        return False
    return all(
        tolerates(request.tolerations, taint)
        for taint in node.get("spec", {}).get("taints") or []
        if taint.get("effect") in BLOCKING_EFFECTS
    )


class NodeMatches:
    """Which nodes match each gang shape (node selector and tolerations), remembered per node object
    (node_memo.py): a count matches only the nodes that changed since the last count of the same
    shape. Used by the admission thread only."""

    def __init__(self):
        self._memo: NodeMemo[bool] = NodeMemo()

    def matching(self, request: GangRequest, nodes: list[dict]) -> list[dict]:
        shape = json.dumps([request.node_selector, request.tolerations], sort_keys=True)
        found = self._memo.values(shape, nodes, lambda node: node_matches(node, request))
        return [node for node, matches in found if matches]


def node_gpus(node: dict) -> int:
    """The node's allocatable GPUs."""
    return quantity((node.get("status", {}).get("allocatable") or {}).get(GPU))


def free_gpus(nodes: list[dict], pods: list[dict], held: dict[str, int] | None = None) -> dict[str, int]:
    """Allocatable GPUs of each node minus those requested by its pods that still hold resources and
    those `held` there by pods not in `pods` (occupancy.py)."""
    used = dict(held or {})
    for pod in pods:
        node = pod.get("spec", {}).get("nodeName")
        if node and not ended(pod):
            used[node] = used.get(node, 0) + pod_gpus(pod)
    return {n["metadata"]["name"]: node_gpus(n) - used.get(n["metadata"]["name"], 0) for n in nodes}


def waiting_gpu_pods(pods: list[dict], candidates: list[dict], free: dict[str, int]) -> int:
    """GPU pods not bound to a node yet that could take one of `candidates` (the scheduler may put
    them there: node selector, affinity, tolerations, and enough of `free` GPUs), so they count
    against those nodes; pods that cannot use them take nothing from this gang. Pods of one gang
    share their constraints, which are matched once."""
    fits: dict[str, bool] = {}
    count = 0
    for pod in pods:
        if pod.get("spec", {}).get("nodeName") or ended(pod) or (gpus := pod_gpus(pod)) == 0:
            continue
        shape = json.dumps([gpus, pod_constraints(pod)], sort_keys=True)
        if shape not in fits:
            fits[shape] = any(free[n["metadata"]["name"]] >= gpus and pod_may_use(pod, n) for n in candidates)
        count += fits[shape]
    return count


def admit_gang(
    request: GangRequest,
    nodes: list[dict],
    pods: list[dict],
    reserved_nodes: int = 0,
    held: dict[str, int] | None = None,
    matches: NodeMatches | None = None,
) -> Admission:
    """Whether `request` fits now. `reserved_nodes`: nodes promised to gangs admitted a moment ago
    whose pods the caller has not seen yet; `held`: GPUs per node of bound pods not in `pods`;
    `matches`: the node matching remembered from earlier counts."""
    if request.gpus_per_pod == 0:
        return Admission(True, reasons.NO_GPUS_REQUESTED, "the gang requests no GPUs; the scheduler places it")
    matching = (matches or NodeMatches()).matching(request, nodes)
    free = free_gpus(matching, pods, held)
    candidates = [n for n in matching if free[n["metadata"]["name"]] >= request.gpus_per_pod]
    waiting = waiting_gpu_pods(pods, candidates, free) + reserved_nodes
    available = max(0, len(candidates) - waiting)
    if available >= request.pods:
        return Admission(
            True,
            reasons.GANG_FITS,
            f"{request.pods} of {available} free nodes with {request.gpus_per_pod} {GPU} each",
            available,
        )
    selector = ",".join(f"{k}={v}" for k, v in sorted(request.node_selector.items())) or "any"
    return Admission(
        False,
        reasons.INSUFFICIENT_GPUS,
        f"the gang needs {request.pods} nodes with {request.gpus_per_pod} free {GPU} "
        f"(node selector {selector}); {available} available of {len(matching)} matching "
        f"nodes ({waiting} taken by GPU pods waiting to be scheduled there)",
        available,
    )


@dataclass
class _Reservation:
    nodes: int
    generation: int
    until: float


class Reservations:
    """GPUs promised to gangs just created whose pods the watch has not shown yet, so two gangs
    admitted a moment apart cannot both count the same free GPUs. A gang's reservation shrinks as
    its pods appear (a pod counts by itself, on its node or waiting) and lapses after
    `hold_seconds`."""

    def __init__(self, hold_seconds: float, clock):
        self.hold_seconds, self.clock = hold_seconds, clock
        self._held: dict = {}
        self.reserved_total = 0
        """Nodes reserved so far, all gangs together: a count made while it grew may have counted
        that many of its free nodes that are no longer free."""

    def reserve(self, key, nodes: int, generation: int) -> None:
        self._held[key] = _Reservation(nodes, generation, self.clock() + self.hold_seconds)
        self.reserved_total += nodes

    def forget(self, key) -> None:
        self._held.pop(key, None)

    def held_by_others(self, key, pods_seen) -> int:
        """Nodes reserved by gangs other than `key`; pods_seen(key, generation) counts the pods
        of a gang the watch has shown. Spent or lapsed reservations are dropped here."""
        now, held = self.clock(), 0
        for other, r in list(self._held.items()):
            seen = pods_seen(other, r.generation)
            if r.until < now or seen >= r.nodes:
                del self._held[other]
            elif other != key:
                held += r.nodes - seen
        return held


def still_fits(verdict: Admission, request: GangRequest, reserved_since: int) -> bool:
    """Whether a fit counted before other gangs reserved `reserved_since` nodes still fits without
    counting again: when even all those nodes were among its free ones, enough are left. (Counting
    again after every reservation made 50 gangs arriving at once count about 50 x 16 / 2 times.)
    A fit with nothing reserved since, or of a gang that requests no GPUs (it counts no nodes),
    stands as counted."""
    if not verdict.fits:
        return False
    return reserved_since == 0 or request.gpus_per_pod == 0 or verdict.available - reserved_since >= request.pods


def admission_backoff(refusals: int) -> float:
    """Seconds a job's refused builtin admission stands before it is counted again: 5 s after the
    first refusal, doubling to 30 s (each count reads every node and pod)."""
    return min(BACKOFF_MAX_SECONDS, BACKOFF_FIRST_SECONDS * 2.0 ** max(0, refusals - 1))


def scheduling_for(spec: LongContextJobSpec, config: OperatorConfig) -> tuple[LongContextJobSpec, str | None]:
    """The spec with the admission this operator applies to it (`forceAdmission`, the default Kueue
    queue), and why the job may not be admitted at all (its mode is not in `admissionModes`, or it
    must go through Kueue and names no queue); None when it may."""
    scheduling = spec.scheduling
    mode = config.force_admission or scheduling.admission
    if config.force_admission is None and mode not in config.admission_modes:
        return spec, (
            f"scheduling.admission {mode} is not allowed by this operator's configuration "
            f"(admissionModes: {', '.join(config.admission_modes)})"
        )
    queue = scheduling.queue_name or config.default_kueue_queue
    if mode == "kueue" and queue is None:
        return spec, (
            "this operator admits every job through Kueue (forceAdmission kueue): set "
            "scheduling.queueName (the operator's configuration has no defaultKueueQueue)"
        )
    if (mode, queue) == (scheduling.admission, scheduling.queue_name):
        return spec, None
    return spec.model_copy(
        update={"scheduling": scheduling.model_copy(update={"admission": mode, "queue_name": queue})}
    ), None
