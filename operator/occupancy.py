"""GPUs held by pods that are not the jobs' own, for builtin admission, without watching them.

The operator watches only its jobs' pods (watch.py, by label). Builtin admission must still know
the GPUs other pods hold on each node and the GPU pods waiting to be scheduled. Rather than decode
every pod event of the cluster, it lists the other pods (`!longctx.io/job-name`, not finished) when
a gang is counted and the last list ended over MAX_AGE_SECONDS ago, and keeps only a count per
node and the few waiting GPU pods. The cost is one paginated list per MAX_AGE_SECONDS while gangs
wait for admission, nothing otherwise, whatever the pod churn. A pod labelled with the job-name
label by someone else is in the operator's own watch, so every pod is counted once.

The view may be up to MAX_AGE_SECONDS old: a gang may be admitted onto GPUs another pod took
meanwhile (its pods then wait for the scheduler and the job's startup timeout ends it), or wait one
more count for GPUs freed meanwhile. Thread-only (the admission thread): it blocks on the API.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from .admission import holds_resources, pod_gpus
from .cache import trim_pod
from .names import JOB_NAME_LABEL

MAX_AGE_SECONDS = 5.0  # admission.BACKOFF_FIRST_SECONDS: a refused gang's next count lists again
LIST_PAGE = 500
NOT_FINISHED = "status.phase!=Succeeded,status.phase!=Failed"


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
        if not holds_resources(pod) or (gpus := pod_gpus(pod)) == 0:
            continue
        if node := pod.get("spec", {}).get("nodeName"):
            used[node] = used.get(node, 0) + gpus
        else:
            waiting.append(trim_pod(pod))
    return Occupancy(used, waiting)


class OtherPods:
    """The last Occupancy of the pods without the job-name label, listed again when older than
    MAX_AGE_SECONDS. `lists`: one list method per scope (all namespaces, or each watched one)."""

    def __init__(self, lists: list[Callable], clock: Callable[[], float]):
        self.lists, self.clock = lists, clock
        self._last: Occupancy | None = None
        self._at = 0.0

    def current(self) -> Occupancy:
        """The last list's Occupancy, listed again when it ended more than MAX_AGE_SECONDS ago. Its
        age counts from the end of the list, not the start: a list slower than MAX_AGE_SECONDS (a
        busy cluster's thousands of pods on a loaded API server) must not make every count list
        again (50 gangs waited minutes for their counts that way, 2026-11-26)."""
        if self._last is None or self.clock() - self._at > MAX_AGE_SECONDS:
            self._last = occupancy(pod for list_call in self.lists for pod in self._list(list_call))
            self._at = self.clock()
        return self._last

    @staticmethod
    def _list(list_call: Callable):
        token = None
        while True:
            page = json.loads(
                list_call(
                    label_selector=f"!{JOB_NAME_LABEL}",
                    field_selector=NOT_FINISHED,
                    limit=LIST_PAGE,
                    _continue=token,
                    _preload_content=False,
                ).data
            )
            yield from page.get("items") or []
            if not (token := page["metadata"].get("continue")):
                return
