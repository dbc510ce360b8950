"""kopf handlers, thin: watch events go to the reconciler's cache and queue (reconciler.py).

kopf watches the LongContextJobs (and Kueue's Workloads); the jobs' Jobs and pods, and the nodes
when builtin admission may run, come from watches filtered by the API server (watch.py), started
with the reconciler.

`make_registry(config)` registers them in an explicit kopf registry; `longctx operator` (main.py)
runs it with the configuration in kopf's memo. Nothing is read at import time.

Only event handlers are used: no kopf change handlers, daemons or timers, so kopf adds no finalizer
and writes nothing to the objects; deleting a LongContextJob needs no running operator, the
garbage collector removes its children through their ownerReferences.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import time

import kopf
import prometheus_client

from .config import OperatorConfig
from .kube import Kube, load_client
from .names import (
    GROUP,
    JOB_NAME_LABEL,
    KUEUE_WORKLOAD_GROUP,
    KUEUE_WORKLOAD_PLURAL,
    KUEUE_WORKLOAD_VERSION,
    PLURAL,
    VERSION,
)
from .occupancy import OtherPods
from .reconciler import Reconciler, api_threads
from .watch import Watch


def _deleted(event: dict) -> bool:
    return event.get("type") == "DELETED"


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf builds every object's "essence" (a deep copy less metadata and status) on every watch
    event, for change and daemon handlers to diff; with event handlers only, nothing reads it. Not
    building it was about a tenth of the operator's CPU while 50 gangs started at once
    (benchmarks/operator_scale.py): pod and node events are most of what it sees."""

    def build(self, *, body, extra_fields=None):
        return None

    def fetch(self, *, body):
        return None

    def store(self, *, body, patch, essence) -> None:
        return None


def configure(settings: kopf.OperatorSettings) -> None:
    """kopf's settings: standalone, no scanning, nothing written to the objects (event handlers only)."""
    settings.peering.standalone = True  # one replica (Deployment strategy Recreate); no peering CRD
    settings.scanning.disabled = True  # no CRD/namespace scanning: fixed resources, fixed namespaces
    settings.posting.level = logging.WARNING  # our own Events carry the lifecycle (kube.post_event)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.watching.server_timeout = 300


def scoped(config: OperatorConfig, list_all, list_namespaced) -> list:
    """A kind's list method for each watched namespace, or the cluster-wide one."""
    if not config.watch_namespaces:
        return [list_all]
    return [functools.partial(list_namespaced, ns) for ns in config.watch_namespaces]


def watches(config: OperatorConfig, kube: Kube, reconciler: Reconciler, loop) -> list[Watch]:
    """The jobs' Jobs and pods by their job-name label; every node when the configuration can read
    them (builtin admission counts their GPUs, the rings' placement reads their labels)."""
    jobs = scoped(config, kube.batch.list_job_for_all_namespaces, kube.batch.list_namespaced_job)
    pods = scoped(config, kube.core.list_pod_for_all_namespaces, kube.core.list_namespaced_pod)
    found = [Watch("jobs", j, reconciler.workload_event, loop, label_selector=JOB_NAME_LABEL) for j in jobs] + [
        Watch("pods", p, reconciler.pod_event, loop, label_selector=JOB_NAME_LABEL) for p in pods
    ]
    if config.read_nodes:
        found.append(Watch("nodes", kube.core.list_node, reconciler.node_event, loop))
    return found


def freeze_startup_objects() -> None:
    """Moves every object made so far (modules, pydantic's validators, kopf, the API client: most
    of the process's objects) out of the garbage collector's reach, for good: they live as long as
    the process. Each full collection walked them all, with the event loop stopped meanwhile
    (docs/operator.md, "Where the batch's CPU goes")."""
    gc.collect()
    gc.freeze()


def make_registry(config: OperatorConfig) -> kopf.OperatorRegistry:
    """The operator's handlers; Kueue's Workloads are watched only when the configuration says it
    can read them."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs) -> kopf.ConnectionInfo | None:
        """The kubeconfig or in-cluster service account, as the kubernetes client reads them (an
        explicit registry gets none of kopf's default login handlers)."""
        return kopf.login_via_client(**kwargs)

    @kopf.on.startup(registry=registry)
    async def start(settings: kopf.OperatorSettings, memo: kopf.Memo, **_) -> None:
        configure(settings)
        if memo.config.metrics_port:
            prometheus_client.start_http_server(memo.config.metrics_port)
        kube = Kube(load_client(api_threads(memo.config)))
        pod_lists = scoped(memo.config, kube.core.list_pod_for_all_namespaces, kube.core.list_namespaced_pod)
        memo.reconciler = Reconciler(kube, memo.config, OtherPods(pod_lists, time.monotonic))
        memo.reconciler.start()
        freeze_startup_objects()
        memo.watches = watches(memo.config, kube, memo.reconciler, asyncio.get_running_loop())
        for watch in memo.watches:
            watch.start()

    @kopf.on.cleanup(registry=registry)
    async def stop(memo: kopf.Memo, **_) -> None:
        for watch in getattr(memo, "watches", []):
            watch.stop()
        if getattr(memo, "reconciler", None) is not None:
            await memo.reconciler.stop()

    def served(namespace: str, **_) -> bool:
        return namespace not in config.excluded_namespaces

    @kopf.on.event(GROUP, VERSION, PLURAL, when=served, registry=registry)
    async def longcontextjob_event(event, memo: kopf.Memo, **_) -> None:
        """LongContextJobs outside the excluded namespaces (kube-system, ...: never served)."""
        memo.reconciler.job_event(event["object"], _deleted(event))

    if config.read_kueue_workloads:

        @kopf.on.event(KUEUE_WORKLOAD_GROUP, KUEUE_WORKLOAD_VERSION, KUEUE_WORKLOAD_PLURAL, registry=registry)
        async def kueue_workload_event(event, memo: kopf.Memo, **_) -> None:
            """Kueue's Workloads: why a job waits in its queue, or why Kueue evicted it."""
            memo.reconciler.kueue_workload_event(event["object"], _deleted(event))

    return registry
