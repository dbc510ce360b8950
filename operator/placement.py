"""Where each rank runs, for the trainer's ring order: the topology levels a job's ranks are ordered
by, and the placement annotation the operator writes onto each bound pod.

Kubernetes copies only a node's zone and region labels onto its pods, and node labels are not in
the downward API, so a rack or NVLink-domain label would never reach the trainer. Once a pod is
bound, the operator (which watches the gang's pods and, with readNodes, the nodes) writes the node's
values of the levels onto the pod as the annotation names.PLACEMENT_ANNOTATION; the trainer reads it
through a downward-API file, which the kubelet refreshes (env would keep its value at start).

The values are the node's, verbatim, and only decide an order: the mesh is relabelled, the
computation is the same (a pod's annotation changed by anyone else changes which neighbours a ring
has, nothing else). Pure functions over the cached pods and nodes: the reconciler only sends the
patches (reconciler._place).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from longctx_trainer.contract.topology import encode_placement, encode_table

from . import names
from .admission import node_gpus, pod_constraints, pod_gpus, pod_may_use
from .api.spec import LongContextJobSpec
from .config import OperatorConfig
from .node_memo import NodeMemo
from .observe import ended


def index_ordered(spec: LongContextJobSpec) -> bool:
    """Kueue's topology-aware scheduling placed the ranks in completion-index order: keep it."""
    return spec.scheduling.admission == "kueue" and spec.scheduling.kueue_topology != "none"


def topology_levels(spec: LongContextJobSpec, config: OperatorConfig) -> tuple[str, ...]:
    """The node labels the trainer orders its rings by, outermost first: the zone, the operator's
    topologyLabels, then `scheduling.topologyKey` unless listed (the node is always the innermost)."""
    keys = (names.ZONE_LABEL, *config.topology_labels, spec.scheduling.topology_key)
    return tuple(dict.fromkeys(k for k in keys if k))


def placement_wanted(spec: LongContextJobSpec, config: OperatorConfig) -> bool:
    """Whether the operator writes the job's pods' placement (and the trainer waits for it): the JAX
    trainer ordering its ranks by topology, where the operator can read the nodes."""
    pytorch = spec.trainer is not None and spec.trainer.framework == "pytorch"
    return config.read_nodes and not pytorch and not index_ordered(spec)


@dataclass(frozen=True)
class PodPlacement:
    name: str
    uid: str
    value: str
    """The annotation's value: the node's labels of the levels (contract/topology.encode_placement)."""


def table_placement(pod: dict, gpus: bool, node: dict, levels: tuple[str, ...]) -> str | None:
    """The node's placement (contract/topology.encode_placement) where the gang's pods (`pod`, the
    Job's template; `gpus`: it asks for GPUs) may run on it: the scheduler could put the pod there
    (admission.pod_may_use) and it has GPUs where the pod asks for them; else None."""
    if not pod_may_use(pod, node) or (gpus and node_gpus(node) == 0):
        return None
    return encode_placement(node["metadata"].get("labels") or {}, levels)


class PlacementTables:
    """Puts into a gang's ConfigMap the placement table (contract/topology.encode_table) of the
    cached nodes its pods may run on (table_placement). The gangs of one shape (the pod's node
    constraints, whether it asks for GPUs, the levels) share their nodes' placements, remembered per
    node object (node_memo.py), and the table's text while no node changed: at 2,000 nodes a table
    took 40 ms of the admission thread per gang. Used by the admission thread only."""

    def __init__(self):
        self._memo: NodeMemo[str | None] = NodeMemo()

    def add(self, config_map: dict, pod: dict, nodes: Mapping[str, dict], levels: tuple[str, ...]) -> frozenset[str]:
        """Returns the nodes the table holds: their pods need no annotation."""
        gpus = pod_gpus(pod) > 0
        shape = json.dumps([pod_constraints(pod), gpus, levels], sort_keys=True)

        def summarize(found: list[tuple[dict, str | None]]) -> tuple[str, frozenset[str]]:
            placements = {node["metadata"]["name"]: value for node, value in found if value is not None}
            table, tabled = encode_table(placements)
            return base64.b64encode(table).decode(), tabled

        text, tabled = self._memo.summary(
            shape, nodes.values(), lambda node: table_placement(pod, gpus, node, levels), summarize
        )
        config_map.setdefault("binaryData", {})[names.PLACEMENT_TABLE_FILE] = text
        return tabled


def config_map_table(config_map: dict) -> bytes:
    """The placement table in a gang's ConfigMap (PlacementTables.add) as the API server serves it
    (binaryData is base64); no bytes where it has none, or none that decode."""
    try:
        return base64.b64decode((config_map.get("binaryData") or {}).get(names.PLACEMENT_TABLE_FILE, ""), validate=True)
    except ValueError:  # binascii.Error
        return b""


def placements_due(
    pods: Iterable[dict], nodes: Mapping[str, dict], levels: tuple[str, ...], tabled: frozenset[str] = frozenset()
) -> tuple[list[PodPlacement], set[str]]:
    """The placements to write: each bound pod, not finished or being deleted, on a node the gang's
    placement table does not hold (`tabled`), whose annotation is not its node's placement; and the
    nodes such pods are bound to that are not cached (yet)."""
    due, unknown = [], set()
    for pod in pods:
        meta, node = pod["metadata"], pod["spec"].get("nodeName")
        if not node or node in tabled or meta.get("deletionTimestamp") or ended(pod):
            continue
        if node not in nodes:
            unknown.add(node)
            continue
        value = encode_placement(nodes[node]["metadata"].get("labels") or {}, levels)
        if (meta.get("annotations") or {}).get(names.PLACEMENT_ANNOTATION) != value:
            due.append(PodPlacement(meta["name"], meta["uid"], value))
    return due, unknown
