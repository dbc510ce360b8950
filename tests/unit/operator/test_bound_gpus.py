"""operator/bound_gpus.py: the bound pods' GPUs per node from a protobuf page, built here with the
module's own schema (tests/integration/test_bound_gpus.py reads the API server's real pages)."""

from __future__ import annotations

import pytest

from longctx_operator.bound_gpus import MAGIC, MESSAGES, count_page


def page(pods: list[tuple[str, list[dict]]], token: str = "") -> bytes:
    """pods: (node, [container resources as {"requests": {...}, "limits": {...}}])."""
    listed = MESSAGES["PodList"]()
    setattr(listed.metadata, "continue", token)
    for node, containers in pods:
        item = listed.items.add()
        item.spec.nodeName = node
        for resources in containers:
            served = item.spec.containers.add().resources
            for kind, values in resources.items():
                for name, value in values.items():
                    getattr(served, kind)[name].string = value
    return MAGIC + MESSAGES["Unknown"](raw=listed.SerializeToString()).SerializeToString()


def gpus(n: str) -> dict:
    return {"requests": {"nvidia.com/gpu": n, "cpu": "1"}, "limits": {"nvidia.com/gpu": n}}


def test_gpus_per_node_from_requests_else_limits_over_every_container():
    used = {"n0": 1}
    token = count_page(
        page(
            [
                ("n1", [gpus("8")]),
                ("n1", [gpus("2"), {"requests": {"cpu": "1"}}, gpus("1k")]),
                ("n2", [{"limits": {"nvidia.com/gpu": "4"}}]),  # limits alone
                ("n2", [{"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "3"}}]),  # requests first
                ("n3", [{"requests": {"cpu": "1"}}]),  # no GPUs: no entry
                ("", [gpus("8")]),  # not bound: not this list's
            ],
            token="next",
        ),
        used,
    )
    assert used == {"n0": 1, "n1": 1010, "n2": 5}
    assert token == "next"


def test_the_last_page_has_no_continue_token():
    assert count_page(page([("n1", [gpus("8")])]), {}) is None


def test_a_response_that_is_not_protobuf_is_refused():
    with pytest.raises(ValueError, match="not a Kubernetes protobuf response"):
        count_page(b'{"kind": "PodList", "items": []}', {})
