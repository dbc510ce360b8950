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
otherwise orders by the pod-label values, where a level reads empty and is unknown. To spare that
write (a pod update that every pod watcher, the kubelet and the endpoint controllers act on), the
operator puts the placements of the nodes a gang may run on into its ConfigMap as a table
(encode_table, LONGCTX_PLACEMENT_TABLE: gzip-compressed JSON, since as plain JSON a large
cluster's table was the slowest write of a starting gang: docs/operator.md, "Where the batch's CPU
goes"), written before any pod exists: a rank whose node is in it
reads its placement at once, and only a pod on a node the table lacks (one that joined later) gets
the annotation. Under
Kueue's topology-aware scheduling (LONGCTX_RANK_ORDER=index) Kueue places ranks in completion-index
order, consecutive ranks in the same domain, so the index order is kept as it is.

Plain data with no JAX import: the trainer orders its mesh with it (trainer/topology.py), the
operator renders the env names, and the planner counts its ring's hops with the same function.
"""

from __future__ import annotations

import gzip
import json
import time
import zlib
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
PLACEMENT_TABLE_MAX_BYTES = 512 * 1024
"""The placement table's JSON size at most, before compression (encode_table): compressed, with
the trainer's config, it stays well inside a ConfigMap's 1 MiB; the nodes beyond it (by name) get
the annotation instead. A reader decompresses no more than this."""


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


def _bounded_json(text: str, limit: int):
    """`text` parsed as JSON; ValueError where it is larger than `limit` bytes or not JSON (checked
    before parsing, so a huge value costs no parse)."""
    if len(text.encode()) > limit:
        raise ValueError(f"larger than {limit} bytes")
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError("not JSON") from None


def decode_placement(text: str) -> dict[str, str]:
    """The label values of a placement annotation; ValueError saying what is wrong with anything
    but a JSON object of strings of at most PLACEMENT_MAX_BYTES."""
    labels = _bounded_json(text, PLACEMENT_MAX_BYTES)
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("not a JSON object of strings")
    return labels


def encode_table(placements: Mapping[str, str]) -> tuple[bytes, frozenset[str]]:
    """The placement table of a gang's candidate nodes, from node name -> its placement annotation
    value (encode_placement): one JSON object {"domains": [labels, ...], "nodes": {node: index}},
    each distinct placement written once, gzip-compressed (no timestamp: the same placements give
    the same bytes). Nodes are taken by name while the JSON stays within PLACEMENT_TABLE_MAX_BYTES;
    returns the bytes and the nodes it holds (the others get the annotation)."""
    domains: dict[str, int] = {}
    nodes: dict[str, int] = {}
    size = len('{"domains":[],"nodes":{}}')
    for node in sorted(placements):
        value = placements[node]
        grows = len(value) + 1 if value not in domains else 0
        entry = len(json.dumps(node)) + len(str(len(domains))) + 2
        if size + grows + entry > PLACEMENT_TABLE_MAX_BYTES:
            break
        index = domains.setdefault(value, len(domains))
        nodes[node], size = index, size + grows + entry
    text = f'{{"domains":[{",".join(domains)}],"nodes":{json.dumps(nodes, separators=(",", ":"))}}}'
    return gzip.compress(text.encode(), mtime=0), frozenset(nodes)


def _table(data: bytes) -> dict:
    """The placement table's JSON object from its gzip bytes; ValueError where they are not gzip,
    hold more than PLACEMENT_TABLE_MAX_BYTES (no more is decompressed) or no JSON object."""
    decompressor = zlib.decompressobj(wbits=31)  # gzip framing
    try:
        text = decompressor.decompress(data, PLACEMENT_TABLE_MAX_BYTES + 1)
    except zlib.error:
        raise ValueError("not gzip") from None
    if len(text) > PLACEMENT_TABLE_MAX_BYTES or decompressor.unconsumed_tail:
        raise ValueError(f"larger than {PLACEMENT_TABLE_MAX_BYTES} bytes")
    if not decompressor.eof:
        raise ValueError("truncated")
    table = _bounded_json(text.decode(errors="replace"), PLACEMENT_TABLE_MAX_BYTES)
    if not isinstance(table, dict):
        raise ValueError("not a placement table")
    return table


def tabled_placement(data: bytes, node: str) -> dict[str, str] | None:
    """The labels the placement table (encode_table's bytes) holds for `node`; None where it has
    none; ValueError saying what is wrong with anything but such a table."""
    table = _table(data)
    domains, nodes = table.get("domains"), table.get("nodes")
    if not isinstance(domains, list) or not isinstance(nodes, dict):
        raise ValueError("not a placement table")
    index = nodes.get(node)
    if index is None:
        return None
    if not isinstance(index, int) or not 0 <= index < len(domains):
        raise ValueError(f"node {node!r} has no domain")
    labels = domains[index]
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise ValueError("a domain is not a JSON object of strings")
    return labels


def tabled_nodes(data: bytes) -> frozenset[str]:
    """The nodes a placement table (encode_table's bytes) holds; none where `data` is not such a
    table. The operator's reader, after a restart: a table it cannot read only means annotating
    every pod."""
    try:
        nodes = _table(data).get("nodes")
    except ValueError:
        nodes = None
    return frozenset(nodes) if isinstance(nodes, dict) else frozenset()


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
    """This pod's node's labels of the levels: from the placement table (LONGCTX_PLACEMENT_TABLE)
    where it holds the node, at once; else the placement annotation's where the pod names its file
    (LONGCTX_PLACEMENT_FILE), waiting for it; or None and why not ("" when neither is named:
    `longctx run`, a rendering that asks for none)."""
    table, node = environ.get(podenv.PLACEMENT_TABLE), environ.get(podenv.NODE_NAME)
    if table and node:
        try:
            labels = tabled_placement(Path(table).read_bytes(), node)
        except (OSError, ValueError):  # unreadable or not ours: the annotation still tells
            labels = None
        if labels is not None:
            return labels, ""
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
    order, ring r's member m is device (r * members + m) * span): what `ring_hops` counts at NODE
    over those placements, in closed form (the planner asks for every layout of thousands of GPUs).
    A ring's members visit the nodes in order, so its hops that cross are its nodes (the last one's
    hop wraps to the first), or none when it stays on one."""
    if members < 2:
        return 0
    most = 0
    for r in range(rings):
        first = r * members * span
        last = first + (members - 1) * span
        nodes = members if span >= devices_per_node else last // devices_per_node - first // devices_per_node + 1
        most = max(most, nodes if nodes > 1 else 0)
    return most
