"""List-and-watch streams filtered by the API server: the operator receives only what is its own.

kopf's filters (`labels=`, `when=`) run in the operator, after every object of the kind in the
cluster has been sent and decoded: a busy cluster's pod churn would cost the operator CPU for pods
it ignores. A `Watch` passes its label selector to the API server instead, so only the jobs'
children cross the wire. kopf keeps the LongContextJobs (and Kueue's Workloads, when read).

A watch runs in a thread of its own (blocking HTTP; JSON decoded off the event loop by msgspec, into
the dicts json.loads gives, in about half its CPU for a gang's pod) and hands each object to a
callback on the event loop. It lists first, then watches from the list's resourceVersion with
bookmarks; when the API server answers 410 Gone (the version is too old) it lists again and
reports as deleted whatever vanished meanwhile. Every delivered object is counted in
longctx_operator_watch_events_total.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator

import msgspec
from kubernetes.client.exceptions import ApiException

from . import metrics

log = logging.getLogger("longctx.operator.watch")
WATCH_SECONDS = 300  # the API server ends each watch request after this long; the next resumes
LIST_PAGE = 500
RETRY_SECONDS = 2.0

Deliver = Callable[[dict, bool], None]


class Gone(Exception):
    """The API server no longer has the watched resourceVersion (410): list again."""


def _lines(response) -> Iterator[bytes]:
    """The newline-delimited JSON events of a watch response, as they arrive."""
    pending = b""
    for chunk in response.stream(65536, decode_content=True):
        pending += chunk
        *lines, pending = pending.split(b"\n")
        yield from (line for line in lines if line.strip())
    if pending.strip():
        yield pending


def _key(obj: dict) -> tuple[str, str]:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


class Watch:
    """One kind, one scope: `list_call` is a kubernetes client list method (e.g.
    CoreV1Api.list_pod_for_all_namespaces, or a namespaced one with `args=(namespace,)`), called with
    the label and field selectors."""

    def __init__(
        self,
        resource: str,
        list_call: Callable,
        deliver: Deliver,
        loop: asyncio.AbstractEventLoop,
        *,
        args: tuple = (),
        label_selector: str | None = None,
    ):
        self.resource, self.list_call, self.args = resource, list_call, args
        self.deliver, self.loop = deliver, loop
        self.selector = {"label_selector": label_selector} if label_selector else {}
        self.known: dict[tuple[str, str], dict] = {}
        """What was last delivered of each object (only its metadata), to report deletions after a relist."""
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"watch-{resource}", daemon=True)
        self.delivered = metrics.WATCH_EVENTS.labels(resource=resource)  # looked up once, not per event

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        """The thread ends at its next event or when its watch request ends (WATCH_SECONDS at most)."""
        self.stopped.set()

    def _send(self, obj: dict, deleted: bool) -> None:
        self.delivered.inc()
        if deleted:
            self.known.pop(_key(obj), None)
        else:
            self.known[_key(obj)] = {"metadata": obj["metadata"]}
        self.loop.call_soon_threadsafe(self.deliver, obj, deleted)

    def relist(self) -> str:
        """Lists everything (in pages), delivers it, reports what vanished as deleted; returns the
        list's resourceVersion."""
        seen: set[tuple[str, str]] = set()
        token = None
        while True:
            response = self.list_call(
                *self.args, limit=LIST_PAGE, _continue=token, _preload_content=False, **self.selector
            )
            page = msgspec.json.decode(response.data)
            for obj in page.get("items") or []:
                seen.add(_key(obj))
                self._send(obj, False)
            token = page["metadata"].get("continue")
            if not token:
                break
        for key in set(self.known) - seen:
            self._send(self.known[key], True)
        return page["metadata"]["resourceVersion"]

    def watch(self, version: str) -> str:
        """Watches from `version` until the request ends; returns the last version seen."""
        try:
            response = self.list_call(
                *self.args,
                watch=True,
                resource_version=version,
                allow_watch_bookmarks=True,
                timeout_seconds=WATCH_SECONDS,
                _preload_content=False,
                **self.selector,
            )
        except ApiException as e:
            if e.status == 410:
                raise Gone(e.reason) from e
            raise
        try:
            for line in _lines(response):
                event = msgspec.json.decode(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone(obj.get("message"))
                    raise ApiException(status=obj.get("code"), reason=obj.get("message"))
                version = obj["metadata"].get("resourceVersion") or version
                if kind != "BOOKMARK":
                    self._send(obj, kind == "DELETED")
                if self.stopped.is_set():
                    break
        finally:
            response.release_conn()
        return version

    def _run(self) -> None:
        version = None
        while not self.stopped.is_set():
            try:
                if version is None:
                    version = self.relist()
                version = self.watch(version)
            except Gone:
                version = None
            except Exception as e:  # noqa: BLE001 - the API server restarts, the connection drops: retry
                log.warning("watch of %s failed (%s); retrying in %.0fs", self.resource, e, RETRY_SECONDS)
                self.stopped.wait(RETRY_SECONDS)
