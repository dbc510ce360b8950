"""operator/watch.py's answer to 410 Gone, which a fresh test API server never sends (its watch
cache still holds every version): the watch raises Gone and the loop lists again."""

from __future__ import annotations

import json

import pytest
from kubernetes.client.exceptions import ApiException

from longctx_operator.watch import Gone, Watch


class Response:
    def __init__(self, events: list[dict]):
        self.data = b"".join(json.dumps(e).encode() + b"\n" for e in events)

    def stream(self, amount, decode_content):
        yield from (self.data[i : i + 7] for i in range(0, len(self.data), 7))  # events split across chunks

    def release_conn(self):
        pass


class Page:
    def __init__(self, version: str, items: list[dict]):
        self.data = json.dumps({"metadata": {"resourceVersion": version}, "items": items}).encode()


class Loop:
    """Runs the delivery at once (the watch's thread is the test's)."""

    @staticmethod
    def call_soon_threadsafe(fn, *args):
        fn(*args)


def pod(name: str, version: str) -> dict:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}}


def test_an_expired_version_in_the_stream_or_as_the_status_is_gone():
    expired = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}}
    stream = Response([{"type": "ADDED", "object": pod("a", "5")}, expired])
    watch = Watch("pods", lambda **_: stream, lambda obj, deleted: None, Loop())
    with pytest.raises(Gone):
        watch.watch("4")

    def refused(**_):
        raise ApiException(status=410, reason="Gone")

    with pytest.raises(Gone):
        Watch("pods", refused, None, None).watch("4")


def test_after_gone_it_lists_again_from_the_new_version_and_reports_what_vanished():
    delivered, calls = [], []

    def list_call(**kwargs):
        calls.append(kwargs.get("resource_version"))
        if not kwargs.get("watch"):
            items = [pod("a", "3"), pod("b", "3")] if len(calls) == 1 else [pod("b", "9")]
            return Page(str(3 * len(calls)), items)
        if kwargs["resource_version"] == "3":
            return Response([{"type": "ERROR", "object": {"code": 410}}])
        watch.stop()
        return Response([{"type": "BOOKMARK", "object": pod("", "12")}])

    watch = Watch("pods", list_call, lambda obj, deleted: delivered.append((obj["metadata"]["name"], deleted)), Loop())
    watch._run()
    assert calls == [None, "3", None, "9"]
    assert delivered == [("a", False), ("b", False), ("b", False), ("a", True)]
