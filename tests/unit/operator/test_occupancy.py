"""operator/occupancy.py: what the pods outside the operator's watch hold, counted from one list,
listed again as the last one nears MAX_AGE_SECONDS, and waited for only when it is older."""

from __future__ import annotations

import json
import threading

import pytest

from longctx_operator.bound_gpus import MAGIC, MESSAGES, PROTOBUF
from longctx_operator.names import JOB_NAME_LABEL
from longctx_operator.occupancy import BOUND, MAX_AGE_SECONDS, WAITING, OtherPods, RefreshStep, occupancy, refresh_step


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
    """A list method answering in pages of one pod, recording its selectors: the pods not bound to a
    node as JSON, the bound ones as protobuf (as the API server encodes them: bound_gpus.py), each
    as asked for."""

    def __init__(self, pods):
        self.pods, self.calls = pods, []

    def __call__(self, label_selector, field_selector, limit, _continue, _preload_content, _headers=None):
        self.calls.append((label_selector, field_selector, _continue))
        bound = {WAITING: False, BOUND: True}[field_selector]
        pods = [p for p in self.pods if bool(p["spec"].get("nodeName")) == bound]
        index = int(_continue or 0)
        token = str(index + 1) if index + 1 < len(pods) else None
        if (_headers or {}).get("Accept") == PROTOBUF:
            assert bound
            return type("Response", (), {"data": protobuf_page(pods[index : index + 1], token)})()
        page = {"metadata": {"continue": token}, "items": pods[index : index + 1]}
        return type("Response", (), {"data": json.dumps(page).encode()})()


def protobuf_page(pods, token) -> bytes:
    """A PodList page as the API server serves it in protobuf, of the fields bound_gpus reads."""
    page = MESSAGES["PodList"]()
    setattr(page.metadata, "continue", token or "")
    for served in pods:
        item = page.items.add()
        item.spec.nodeName = served["spec"]["nodeName"]
        for container in served["spec"]["containers"]:
            resources = item.spec.containers.add().resources
            for kind in ("requests", "limits"):
                for name, value in (container.get("resources") or {}).get(kind, {}).items():
                    getattr(resources, kind)[name].string = value
    envelope = MESSAGES["Unknown"](raw=page.SerializeToString())
    return MAGIC + envelope.SerializeToString()


def served(name, gpus, node=None):
    """A pod as the API server lists it: managed fields, env, volumes, default tolerations and
    conditions beside what admission reads."""
    served = pod(name, gpus, node, phase="Pending" if node is None else "Running")
    if node is None:
        del served["spec"]["nodeName"]  # the API server leaves unset fields out
    served["metadata"] |= {
        "uid": f"uid-{name}",
        "labels": {"app": name},
        "annotations": {"note": "x" * 100},
        "creationTimestamp": "2026-11-28T01:00:00Z",
        "ownerReferences": [{"kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": True}],
        "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {"f:containers": {}}}}],
    }
    served["spec"]["containers"][0] |= {"image": "i", "env": [{"name": "A", "value": "1"}], "volumeMounts": []}
    served["spec"] |= {
        "volumes": [{"name": "v", "projected": {"sources": []}}],
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "z", "operator": "In", "values": ["a"]}]}]
                }
            }
        },
    }
    served["status"] |= {"conditions": [{"type": "PodScheduled", "status": "False"}], "qosClass": "Burstable"}
    return served


def test_a_listed_pod_keeps_what_admission_reads_and_its_status_only_as_its_phase():
    pods = [served("bound", 8, "n1"), served("waiting", 4), served("cpu", 0, "n1")]
    listed = OtherPods([Pages(pods)], lambda: 0.0).current()
    loaded = occupancy(pods)
    assert listed.used == loaded.used == {"n1": 8}
    assert [p["metadata"]["name"] for p in listed.waiting] == ["waiting"]
    assert listed.waiting[0]["spec"] == loaded.waiting[0]["spec"]  # selector, tolerations, affinity
    assert listed.waiting[0]["metadata"] == loaded.waiting[0]["metadata"]
    assert listed.waiting[0]["status"]["phase"] == "Pending"


def test_other_pods_are_listed_by_selector_in_pages_and_again_only_once_stale():
    now = [100.0]
    pages = Pages([pod("a", 8, "n1"), pod("b", 8, "n2")])
    others = OtherPods([pages], lambda: now[0])
    assert others.current().used == {"n1": 8, "n2": 8}
    others_ = f"!{JOB_NAME_LABEL}"
    assert pages.calls == [(others_, WAITING, None), (others_, BOUND, None), (others_, BOUND, "1")]
    pages.pods = [pod("a", 8, "n1")]
    now[0] += MAX_AGE_SECONDS
    assert others.current().used == {"n1": 8, "n2": 8}  # not stale yet: no request
    assert len(pages.calls) == 3
    now[0] += 0.1
    assert others.current().used == {"n1": 8}
    assert len(pages.calls) == 5


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
    assert len(pages.calls) == 3  # one list: the waiting pods' page, the bound pods' two


@pytest.mark.parametrize(
    ("age", "took", "listing", "step"),
    [
        (None, 0.0, False, RefreshStep(start=True, wait=True)),  # no list yet
        (None, 0.0, True, RefreshStep(start=False, wait=True)),  # the first one is under way
        (1.0, 1.0, False, RefreshStep(start=False, wait=False)),
        (MAX_AGE_SECONDS - 1.5, 1.0, False, RefreshStep(start=False, wait=False)),
        (MAX_AGE_SECONDS - 0.5, 1.0, False, RefreshStep(start=True, wait=False)),  # the next would end late
        (MAX_AGE_SECONDS - 0.5, 1.0, True, RefreshStep(start=False, wait=False)),
        (1.0, 60.0, False, RefreshStep(start=False, wait=False)),  # a slow list: at most half the age ahead
        (MAX_AGE_SECONDS / 2 + 0.1, 60.0, False, RefreshStep(start=True, wait=False)),
        (MAX_AGE_SECONDS + 0.1, 0.0, False, RefreshStep(start=True, wait=True)),  # stale
        (MAX_AGE_SECONDS + 0.1, 0.0, True, RefreshStep(start=False, wait=True)),
    ],
)
def test_a_count_waits_only_for_a_stale_list_and_starts_the_next_before_it_is(age, took, listing, step):
    assert refresh_step(age, took, listing) == step


def test_a_count_near_the_age_limit_lists_again_in_the_background_and_counts_with_the_last_list():
    """The last list took 2 s and is 4 s old: the next is started at once, in its own thread, and
    the count uses the last one without waiting for it (counts of a burst of gangs waited for every
    list in the admission thread, a second each at load 20, 2026-11-27)."""
    now = [100.0]
    release, started = threading.Event(), threading.Event()

    class Blocked(Pages):
        block = False

        def __call__(self, *args, **kwargs):
            if not self.block:
                now[0] += 1.0  # the first list takes 2 s, a second for each of its two requests
            else:
                started.set()
                release.wait(10)
            return super().__call__(*args, **kwargs)

    pages = Blocked([pod("a", 8, "n1")])
    others = OtherPods([pages], lambda: now[0])
    assert others.current().used == {"n1": 8}
    pages.pods, pages.block = [pod("b", 8, "n2")], True
    now[0] += MAX_AGE_SECONDS - 1.0
    try:
        assert others.current().used == {"n1": 8}  # the last list, not waiting for the next
        assert started.wait(10)
    finally:
        release.set()
    now[0] += 1.5  # the last list is stale now: a count waits for the one under way
    assert others.current().used == {"n2": 8}
    others.stop()
