"""operator/occupancy.py: what the pods outside the operator's watch hold, counted from one list,
and listed again only when the last list is older than MAX_AGE_SECONDS."""

from __future__ import annotations

import json

from longctx_operator.names import JOB_NAME_LABEL
from longctx_operator.occupancy import MAX_AGE_SECONDS, NOT_FINISHED, OtherPods, occupancy


def pod(name, gpus, node=None, phase="Running"):
    containers = [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}]
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {"nodeName": node, "containers": containers, "nodeSelector": {"pool": "p"}},
        "status": {"phase": phase},
    }


def test_bound_gpus_per_node_and_waiting_gpu_pods_only():
    found = occupancy(
        [
            pod("a", 8, "n1"),
            pod("b", 2, "n1"),
            pod("c", 4, "n2"),
            pod("cpu", 0, "n2"),
            pod("done", 8, "n3", phase="Succeeded"),
            pod("waiting", 8),
            pod("cpu-waiting", 0),
        ]
    )
    assert found.used == {"n1": 10, "n2": 4}
    assert [p["metadata"]["name"] for p in found.waiting] == ["waiting"]
    assert found.waiting[0]["spec"]["nodeSelector"] == {"pool": "p"}  # what admission matches


class Pages:
    """A list method answering in pages of one pod, recording its selectors."""

    def __init__(self, pods):
        self.pods, self.calls = pods, []

    def __call__(self, label_selector, field_selector, limit, _continue, _preload_content):
        self.calls.append((label_selector, field_selector, _continue))
        index = int(_continue or 0)
        page = {"metadata": {"continue": str(index + 1) if index + 1 < len(self.pods) else None}}
        page["items"] = self.pods[index : index + 1]
        return type("Response", (), {"data": json.dumps(page).encode()})()


def test_other_pods_are_listed_by_selector_in_pages_and_again_only_once_stale():
    now = [100.0]
    pages = Pages([pod("a", 8, "n1"), pod("b", 8, "n2")])
    others = OtherPods([pages], lambda: now[0])
    assert others.current().used == {"n1": 8, "n2": 8}
    assert pages.calls == [(f"!{JOB_NAME_LABEL}", NOT_FINISHED, None), (f"!{JOB_NAME_LABEL}", NOT_FINISHED, "1")]
    pages.pods = [pod("a", 8, "n1")]
    now[0] += MAX_AGE_SECONDS
    assert others.current().used == {"n1": 8, "n2": 8}  # not stale yet: no request
    assert len(pages.calls) == 2
    now[0] += 0.1
    assert others.current().used == {"n1": 8}
    assert len(pages.calls) == 3


def test_a_list_slower_than_the_max_age_is_not_stale_when_it_ends():
    """The age counts from the end of the list: a list that takes longer than MAX_AGE_SECONDS is
    used by the next count, not made again at once."""
    now = [100.0]

    class Slow(Pages):
        def __call__(self, *args, **kwargs):
            now[0] += MAX_AGE_SECONDS  # each page takes that long
            return super().__call__(*args, **kwargs)

    pages = Slow([pod("a", 8, "n1"), pod("b", 8, "n2")])
    others = OtherPods([pages], lambda: now[0])
    assert others.current().used == {"n1": 8, "n2": 8}
    assert others.current().used == {"n1": 8, "n2": 8}
    assert len(pages.calls) == 2  # one list of two pages
