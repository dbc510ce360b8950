"""Topology-ordered rings: where each process runs, the process order that keeps ring neighbours
close, and how many ring hops cross each topology level.

A process's placement is its domain at each level, outermost first, its node last: the node labels
the operator names in LONGCTX_TOPOLOGY_LEVELS (the zone, then `scheduling.topologyKey`, e.g. the
NVLink clique or rack), read through the downward API from the pod's labels, then the node's name
(`spec.nodeName`). Kubernetes copies a node's `topology.kubernetes.io/zone` and `region` labels onto
the pods bound to it (KEP-4742, beta in 1.35); other labels reach a pod only where the cluster copies
them. The operator therefore writes the node's values of the levels onto each bound pod as an
annotation (encode_placement), which the pod sees as a file (LONGCTX_PLACEMENT_FILE, a downward-API
volume: updated after start, unlike env); a rank waits for it a bounded time (read_placement) and
otherwise orders by the pod-label values, where a level reads empty and is unknown. Under
Kueue's topology-aware scheduling (LONGCTX_RANK_ORDER=index) Kueue places ranks in completion-index
order, consecutive ranks in the same domain, so the index order is kept as it is.

Plain data with no JAX import: the trainer orders its mesh with it (trainer/topology.py), the
operator renders the env names, and the planner counts its ring's hops with the same function.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import podenv

NODE = "node"
"""The innermost level's name: the node the process runs on."""
ORDER_TOPOLOGY, ORDER_INDEX = "topology", "index"
"""LONGCTX_RANK_ORDER: sort processes by placement, or keep the index order (Kueue placed it)."""
PLACEMENT_WAIT_SECONDS = 90.0
"""How long a rank waits for the placement annotation: the operator writes it within a second of
seeing the pod bound; the kubelet rewrites a pod's downward-API and projected volumes when it sees
the pod updated, and at the latest at its periodic sync, 60 to 90 s (kubernetes/kubernetes#59873)."""
PLACEMENT_MAX_BYTES = 16 * 1024
"""A few label keys (317 characters at most) and values (63): anything longer is not ours."""


@dataclass(frozen=True)
class Placement:
    """One process's domain at each level, outermost first, its node last ("" where unknown)."""

    domains: tuple[str, ...]


@dataclass(frozen=True)
class Topology:
    """The levels (label keys, outermost first, then NODE) and how to order the ranks."""

    levels: tuple[str, ...]
    order: str

    @classmethod
    def from_environ(
        cls, environ: Mapping[str, str], node_labels: Mapping[str, str] | None = None
    ) -> tuple[Topology, Placement]:
        """The levels and this process's placement from the pod env, each level's value taken from
        `node_labels` (the placement annotation) where it has the level's key; a wrong
        LONGCTX_RANK_ORDER raises ValueError naming it."""
        keys = tuple(k for k in environ.get(podenv.TOPOLOGY_LEVELS, "").split(",") if k)
        order = environ.get(podenv.RANK_ORDER, ORDER_TOPOLOGY)
        if order not in (ORDER_TOPOLOGY, ORDER_INDEX):
            raise ValueError(f"{podenv.RANK_ORDER}={order!r}: must be {ORDER_TOPOLOGY} or {ORDER_INDEX}")
        labels = node_labels or {}
        values = [labels.get(k, environ.get(podenv.topology_level(i), "")) for i, k in enumerate(keys)]
        values.append(environ.get(podenv.NODE_NAME, ""))
        return cls((*keys, NODE), order), Placement(tuple(values))


def encode_placement(node_labels: Mapping[str, str], keys: Sequence[str]) -> str:
    """The placement annotation of a pod on a node with `node_labels`: the node's value of each of
    `keys` it has, verbatim, as one JSON object (keys sorted, so the same node gives the same text)."""
    return json.dumps({k: node_labels[k] for k in keys if k in node_labels}, sort_keys=True, separators=(",", ":"))


def decode_placement(text: str) -> dict[str, str]:
    """The label values of a placement annotation; ValueError saying what is wrong with anything
    but a JSON object of strings of at most PLACEMENT_MAX_BYTES."""
    if len(text.encode()) > PLACEMENT_MAX_BYTES:
        raise ValueError(f"larger than {PLACEMENT_MAX_BYTES} bytes")
    try:
        labels = json.loads(text)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("not a JSON object of strings")
    return labels


def read_placement(
    path: Path,
    timeout: float = PLACEMENT_WAIT_SECONDS,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    poll: float = 0.5,
) -> tuple[dict[str, str] | None, str]:
    """The placement annotation in `path` (a downward-API file: empty until the operator writes
    the annotation), waiting up to `timeout` seconds for it: (labels, "") or (None, why not)."""
    deadline = clock() + timeout
    while True:
        try:
            text = path.read_text()
        except OSError as error:
            text, missing = "", f"{path}: {error.strerror or error}"
        else:
            missing = f"{path} stayed empty (the operator wrote no placement annotation)"
        if text.strip():
            try:
                return decode_placement(text), ""
            except ValueError as error:
                return None, f"{path}: {error}"
        if clock() >= deadline:
            return None, f"{missing} for {timeout:g}s"
        sleep(min(poll, max(0.0, deadline - clock())))


def placement_labels(environ: Mapping[str, str], timeout: float = PLACEMENT_WAIT_SECONDS) -> tuple[dict | None, str]:
    """The placement annotation's labels where the pod names its file (LONGCTX_PLACEMENT_FILE), or
    None and why not ("" when no file is named: `longctx run`, a rendering that asks for none)."""
    path = environ.get(podenv.PLACEMENT_FILE)
    return read_placement(Path(path), timeout) if path else (None, "")


def ring_order(placements: Sequence[Placement], order: str = ORDER_TOPOLOGY) -> list[int]:
    """Process ids in ring order: grouped by the outermost level, then the next, down to the node
    (ties keep the index order); `index` keeps the index order."""
    ids = range(len(placements))
    if order == ORDER_INDEX:
        return list(ids)
    return sorted(ids, key=lambda p: (placements[p].domains, p))


def known_levels(topology: Topology, placements: Sequence[Placement]) -> tuple[str, ...]:
    """The levels every process knows its domain at."""
    return tuple(level for i, level in enumerate(topology.levels) if all(p.domains[i] for p in placements))


def ring_hops(levels: Sequence[str], rings: Sequence[Sequence[Placement]]) -> dict[str, int]:
    """Per level, the most hops of any one ring (member i to i + 1, the last back to the first)
    whose ends are in different domains at that level or an outer one. A ring's step waits for
    its slowest hop, so these say which link sets it."""
    hops = dict.fromkeys(levels, 0)
    for ring in rings:
        size = len(ring)
        pairs = [(ring[i], ring[(i + 1) % size]) for i in range(size)] if size > 1 else []
        for depth, level in enumerate(levels):
            crossing = sum(a.domains[: depth + 1] != b.domains[: depth + 1] for a, b in pairs)
            hops[level] = max(hops[level], crossing)
    return hops


def consecutive_ring_hops(members: int, span: int, devices_per_node: int, rings: int = 1) -> int:
    """The most hops that cross nodes in any of `rings` topology-ordered rings laid one after
    another over nodes of `devices_per_node` devices (the planner's layout: devices fill nodes in
    order, ring r's member m is device (r * members + m) * span)."""
    nodes = [
        [Placement((str((r * members + m) * span // devices_per_node),)) for m in range(members)] for r in range(rings)
    ]
    return ring_hops((NODE,), nodes)[NODE]
