"""GPUs held by pods that are not the jobs' own, for builtin admission, without watching them.

The operator watches only its jobs' pods (watch.py, by label). Builtin admission must still know
the GPUs other pods hold on each node and the GPU pods waiting to be scheduled. Rather than decode
every pod event of the cluster, it lists the other pods (`!longctx.io/job-name`, not finished) when
a gang is counted and the last list ended over MAX_AGE_SECONDS ago, and keeps only a count per
node and the few waiting GPU pods. The cost is one paginated list per MAX_AGE_SECONDS while gangs
wait for admission, nothing otherwise, whatever the pod churn. A pod labelled with the job-name
label by someone else is in the operator's own watch, so every pod is counted once.

One list is two: the pods not bound to a node yet, as JSON decoded into the dicts admission
matches (few: a cluster's pods are bound within seconds), then the bound ones, as protobuf in large
pages, counted per node without building a dict (bound_gpus.py): the API server serves that at a
fraction of JSON's cost, and most of a busy cluster's pods are bound. A pod bound between the two
lists is counted twice (in the waiting GPU pods and on its node), never missed.

The view may be up to MAX_AGE_SECONDS old: a gang may be admitted onto GPUs another pod took
meanwhile (its pods then wait for the scheduler and the job's startup timeout ends it), or wait one
more count for GPUs freed meanwhile. A list takes seconds on a loaded API server (1 s for a few
hundred pods at load 20, 2026-11-27), and every count of a burst of gangs waited for it in the one
admission thread: so a count that finds the list close to its age limit starts the next list in a
thread of its own and counts with the last one (`refresh_step`); a count waits for a list only when
there is none younger than MAX_AGE_SECONDS. Called from the admission thread: it may block on the API.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypedDict

import msgspec

from .admission import pod_gpus
from .bound_gpus import PROTOBUF, count_page
from .cache import trim_pod
from .names import JOB_NAME_LABEL
from .observe import ended

MAX_AGE_SECONDS = 5.0  # admission.BACKOFF_FIRST_SECONDS: a refused gang's next count lists again
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"
WAITING = f"spec.nodeName=,{NOT_FINISHED}"
BOUND = f"spec.nodeName!=,{NOT_FINISHED}"
WAITING_PAGE = 500
BOUND_PAGE = 5000  # every page walks the API server's watch cache from its continue key (docs/operator.md)


class _Resources(TypedDict, total=False):
    requests: dict[str, Any] | None
    limits: dict[str, Any] | None


class _Container(TypedDict, total=False):
    name: str | None
    resources: _Resources | None


class _Spec(TypedDict, total=False):
    nodeName: str | None
    containers: list[_Container] | None
    nodeSelector: dict[str, str] | None
    tolerations: list[dict[str, Any]] | None
    affinity: dict[str, Any] | None


class _Meta(TypedDict, total=False):
    name: str | None
    namespace: str | None
    uid: str | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    deletionTimestamp: str | None
    creationTimestamp: str | None
    ownerReferences: list[dict[str, Any]] | None


class _Status(TypedDict, total=False):
    phase: str | None


class _Pod(TypedDict, total=False):
    metadata: _Meta
    spec: _Spec
    status: _Status


_PAGE = msgspec.json.Decoder(TypedDict("_Page", {"items": list[_Pod], "metadata": dict[str, Any]}, total=False))


def decode_page(data: bytes) -> dict:
    """A page of the other pods (a PodList's JSON), decoded into dicts holding only what `occupancy`
    and `trim_pod` read of them (a pod's status: its phase). Decoding skips the rest (managed
    fields, env, volumes, conditions) without building it, for a fraction of json.loads' CPU
    (benchmarks/pod_list_decode.py)."""
    return _PAGE.decode(data)


@dataclass(frozen=True)
class Occupancy:
    used: dict[str, int]
    """GPUs requested by the other pods bound to each node."""
    waiting: list[dict]
    """The other GPU pods not bound to a node yet (trimmed: what admission matches)."""


def occupancy(pods) -> Occupancy:
    used: dict[str, int] = {}
    waiting = []
    for pod in pods:
        if ended(pod) or (gpus := pod_gpus(pod)) == 0:
            continue
        if node := pod.get("spec", {}).get("nodeName"):
            used[node] = used.get(node, 0) + gpus
        else:
            waiting.append(trim_pod(pod))
    return Occupancy(used, waiting)


@dataclass(frozen=True)
class RefreshStep:
    start: bool
    """Start a list (in the occupancy thread)."""
    wait: bool
    """Wait for the list under way instead of counting with the last one."""


def refresh_step(age: float | None, last_list_seconds: float, listing: bool) -> RefreshStep:
    """What a count does, the last list having ended `age` seconds ago (None: no list yet) and taken
    `last_list_seconds`, while a list is or is not under way: with no list younger than
    MAX_AGE_SECONDS, it waits for one; when the last one is close enough to that age that the next
    would end after it (by its duration, at most half the age ahead: a list slower than the age must
    not run back to back), it starts the next and counts with the last; else it counts with it."""
    stale = age is None or age > MAX_AGE_SECONDS
    due = stale or age > MAX_AGE_SECONDS - min(last_list_seconds, MAX_AGE_SECONDS / 2)
    return RefreshStep(start=due and not listing, wait=stale)


class OtherPods:
    """The last Occupancy of the pods without the job-name label, listed again in a thread of its
    own as it nears MAX_AGE_SECONDS (`refresh_step`). `lists`: one list method per scope (all
    namespaces, or each watched one)."""

    def __init__(self, lists: list[Callable], clock: Callable[[], float]):
        self.lists, self.clock = lists, clock
        self._last: Occupancy | None = None
        self._at = 0.0
        self._took = 0.0
        self._listing: Future | None = None
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="occupancy")

    def current(self) -> Occupancy:
        """The Occupancy to count with: the last list's while it is younger than MAX_AGE_SECONDS,
        else the next list's. Its age counts from the end of the list, not the start: a list slower
        than MAX_AGE_SECONDS (a busy cluster's thousands of pods on a loaded API server) must not
        make every count list again (50 gangs waited minutes for their counts that way, 2026-11-26).
        A failed list raises here only to a count that waits for it."""
        with self._lock:
            age = None if self._last is None else self.clock() - self._at
            step = refresh_step(age, self._took, self._listing is not None)
            if step.start:
                self._listing = self._thread.submit(self._refresh)
            listing, last = self._listing, self._last
        return listing.result() if step.wait else last

    def stop(self) -> None:
        self._thread.shutdown(wait=False, cancel_futures=True)

    def _refresh(self) -> Occupancy:
        started = self.clock()
        try:
            waiting = occupancy(pod for list_call in self.lists for pod in self._waiting(list_call)).waiting
            used: dict[str, int] = {}
            for list_call in self.lists:
                self._count_bound(list_call, used)
            found = Occupancy(used, waiting)
            with self._lock:
                self._last, self._at = found, self.clock()
                self._took = self._at - started
            return found
        finally:
            with self._lock:
                self._listing = None

    @staticmethod
    def _waiting(list_call: Callable):
        token = None
        while True:
            page = decode_page(
                list_call(
                    label_selector=f"!{JOB_NAME_LABEL}",
                    field_selector=WAITING,
                    limit=WAITING_PAGE,
                    _continue=token,
                    _preload_content=False,
                ).data
            )
            yield from page.get("items") or []
            if not (token := page["metadata"].get("continue")):
                return

    @staticmethod
    def _count_bound(list_call: Callable, used: dict[str, int]) -> None:
        token = None
        while True:
            response = list_call(
                label_selector=f"!{JOB_NAME_LABEL}",
                field_selector=BOUND,
                limit=BOUND_PAGE,
                _continue=token,
                _preload_content=False,
                _headers={"Accept": PROTOBUF},
            )
            if not (token := count_page(response.data, used)):
                return
