"""The ring order of the mesh from where the processes run (contract/topology.py).

At rendezvous every process sends its placement (its node and its domain at each topology level)
to all the others through a process all-gather; each then sorts the processes the same way and
lays the mesh's devices out in that order, so that a context ring's neighbours (and a tensor
group) sit on one node, then in one NVLink domain or rack. The reordering is a relabelling of
devices: data are placed by mesh position, so the computation and the loss are the same.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh

from .contract.config import ParallelConfig
from .contract.topology import Placement, Topology, known_levels, ring_hops, ring_order
from .mesh import CONTEXT, make_mesh

ProcessOf = Callable[[jax.Device], int]


def _process_index(device: jax.Device) -> int:
    return device.process_index


def exchange(placement: Placement) -> list[Placement]:
    """Every process's placement, in process order (collective: every process must call it)."""
    if jax.process_count() == 1:
        return [placement]
    data = np.frombuffer(json.dumps(placement.domains).encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.array([data.size], np.int32))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: data.size] = data
    gathered = multihost_utils.process_allgather(padded)
    return [
        Placement(tuple(json.loads(bytes(row[: int(size)]).decode())))
        for row, size in zip(gathered, sizes.reshape(-1), strict=True)
    ]


def ordered_devices(
    order: Sequence[int], devices: Sequence[jax.Device], process_of: ProcessOf = _process_index
) -> list[jax.Device]:
    """`devices` process by process in `order`, each process's in id order."""
    rank = {process: position for position, process in enumerate(order)}
    return sorted(devices, key=lambda d: (rank[process_of(d)], d.id))


def context_rings(mesh: Mesh) -> list[list[jax.Device]]:
    """The devices of each context ring (one per data and tensor index), in ring order."""
    axis = mesh.axis_names.index(CONTEXT)
    rows = np.moveaxis(mesh.devices, axis, -1).reshape(-1, mesh.devices.shape[axis])
    return [list(row) for row in rows]


@dataclass(frozen=True)
class RingReport:
    """The processes in ring order, the levels known, and per level the most hops one context
    ring makes across it: with the topology order (`hops`) and in plain index order (`unordered`)."""

    order: list[int]
    hops: dict[str, int]
    unordered: dict[str, int]
    rank_order: str

    def event(self) -> dict:
        return {
            "event": "ring_order",
            "order": self.order,
            "rank_order": self.rank_order,
            "cross_hops": self.hops,
            "cross_hops_index_order": self.unordered,
        }


def hops_of(
    mesh: Mesh, placements: Sequence[Placement], topology: Topology, process_of: ProcessOf = _process_index
) -> dict[str, int]:
    """Per known level, the most hops one context ring of `mesh` makes across it."""
    levels = known_levels(topology, placements)
    indices = [topology.levels.index(level) for level in levels]

    def projected(device: jax.Device) -> Placement:  # the known levels only
        return Placement(tuple(placements[process_of(device)].domains[i] for i in indices))

    return ring_hops(levels, [[projected(d) for d in ring] for ring in context_rings(mesh)])


def ordered_mesh(
    parallel: ParallelConfig,
    topology: Topology,
    placements: Sequence[Placement],
    devices: Sequence[jax.Device] | None = None,
    process_of: ProcessOf = _process_index,
) -> tuple[Mesh, RingReport]:
    """The mesh with its devices in ring order, and the report of that order. `process_of` says
    which process a device belongs to (a test simulates several processes in one)."""
    devices = list(jax.devices() if devices is None else devices)
    order = ring_order(placements, topology.order)
    mesh = make_mesh(parallel, ordered_devices(order, devices, process_of))
    plain = make_mesh(parallel, ordered_devices(range(len(placements)), devices, process_of))
    report = RingReport(
        order=order,
        hops=hops_of(mesh, placements, topology, process_of),
        unordered=hops_of(plain, placements, topology, process_of),
        rank_order=topology.order,
    )
    return mesh, report
