"""kopf handlers, thin: watch events go to the reconciler's cache and queue (reconciler.py).

Run with `longctx operator` or `kopf run -m longctx_operator.handlers [--namespace NS | --all-namespaces]`.
Environment: LONGCTX_OPERATOR_WORKERS (16), LONGCTX_PROGRESS_INTERVAL_SECONDS (10),
LONGCTX_OPERATOR_METRICS_PORT (unset: no metrics server), LONGCTX_OPERATOR_READ_NODES (default: the
`canReadNodes` of the Helm chart's config file $LONGCTX_OPERATOR_CONFIG, else true; false with
namespace-scoped RBAC, where nodes cannot be watched) and the renderer's LONGCTX_* settings.

Only event handlers are used: no kopf change handlers, daemons or timers, so kopf adds no finalizer
and writes nothing to the objects; deleting a LongContextJob needs no running operator, the
garbage collector removes its children through their ownerReferences.
"""

from __future__ import annotations

import logging
import os

import kopf
import prometheus_client
import yaml

from .kube import GROUP, PLURAL, VERSION, Kube, load_client
from .reconciler import Reconciler
from .render import OperatorSettings
from .render.names import JOB_NAME_LABEL

_state: dict[str, Reconciler] = {}


def can_read_nodes(environ=os.environ) -> bool:
    """Whether to watch nodes (builtin admission needs them)."""
    if "LONGCTX_OPERATOR_READ_NODES" in environ:
        return environ["LONGCTX_OPERATOR_READ_NODES"].lower() not in ("0", "false", "no")
    config = environ.get("LONGCTX_OPERATOR_CONFIG")
    if config and os.path.isfile(config):
        with open(config) as f:
            return bool((yaml.safe_load(f) or {}).get("canReadNodes", True))
    return True


READ_NODES = can_read_nodes()


def _reconciler() -> Reconciler:
    return _state["reconciler"]


@kopf.on.startup()
async def start(settings: kopf.OperatorSettings, **_) -> None:
    settings.peering.standalone = True  # one replica (Deployment strategy Recreate); no peering CRD
    settings.scanning.disabled = True  # no CRD/namespace scanning: fixed resources, fixed namespaces
    settings.posting.level = logging.WARNING  # our own Events carry the lifecycle (kube.post_event)
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=GROUP)
    settings.watching.server_timeout = 300
    if port := os.environ.get("LONGCTX_OPERATOR_METRICS_PORT"):
        prometheus_client.start_http_server(int(port))
    reconciler = Reconciler(Kube(load_client()), OperatorSettings.from_env(), nodes_visible=READ_NODES,
                            workers=int(os.environ.get("LONGCTX_OPERATOR_WORKERS", "16")),
                            progress_interval=float(os.environ.get("LONGCTX_PROGRESS_INTERVAL_SECONDS", "10")))
    reconciler.start()
    _state["reconciler"] = reconciler


@kopf.on.cleanup()
async def stop(**_) -> None:
    if "reconciler" in _state:
        await _state.pop("reconciler").stop()


def _deleted(event: dict) -> bool:
    return event.get("type") == "DELETED"


@kopf.on.event(GROUP, VERSION, PLURAL)
async def longcontextjob_event(event, **_) -> None:
    _reconciler().job_event(event["object"], _deleted(event))


@kopf.on.event("batch/v1", "jobs", labels={JOB_NAME_LABEL: kopf.PRESENT})
async def workload_event(event, **_) -> None:
    _reconciler().workload_event(event["object"], _deleted(event))


@kopf.on.event("v1", "pods")
async def pod_event(event, **_) -> None:
    """Every pod: the job's ranks, and the GPUs other pods hold (builtin admission)."""
    _reconciler().pod_event(event["object"], _deleted(event))


if READ_NODES:
    @kopf.on.event("v1", "nodes")
    async def node_event(event, **_) -> None:
        _reconciler().node_event(event["object"], _deleted(event))
