"""The compute probe: a signal of this process's own speed that collectives cannot equalise; and
the link probe (LinkProbe), the same for its node's network link.

In a synchronous gang every rank waits for the slowest at each collective, so every rank's
wall-clock step time is about the same: a rank whose device is slow cannot be told from the ranks
that wait for it by its step time. The probe is a fixed computation (a chain of square matmuls)
with no collective, run on each of this process's devices at once and timed to the last one's
end. Between steps (the state is ready, nothing else is queued) it measures how fast this
process's devices, and the host threads driving them, are now; the trainer exports it
(health.PROBE_SECONDS) and the operator compares the ranks by it (longctx_operator.straggler).

It runs after every `metrics.probe_every_steps` steps, and the trainer exports the median of the
last PROBE_KEPT probes (contract/health.py, shared with the PyTorch example's probe), so the
operator's window is not reset by one noisy probe. Its cost is fixed by PROBE_WORK: on one idle
CPU core about 50 ms (2 GFLOP, measured); on a GPU 1.1 TFLOP, about a millisecond at an H100's
dense bf16 peak (computed: not yet run on a GPU). Every ten steps, that is a few percent of the
CPU quickstart's time (four devices a process on two cores) and far less of a GPU job's. It is
compiled once for each device at the start, so no probe's time includes a compilation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from .contract.health import RecentTimes, link_probe_bytes, link_rounds, probe_work


def _chain(x: jax.Array, matmuls: int) -> jax.Array:
    """`matmuls` dependent products, each squashed by tanh so the values stay bounded."""
    return jax.lax.fori_loop(0, matmuls, lambda _, y: jnp.tanh(y @ x), x)


class ComputeProbe:
    """The probe on `devices` (this process's): `measure()` runs it and returns the probe time."""

    def __init__(self, devices: Sequence[jax.Device]):
        side, matmuls, dtype = probe_work(devices[0].platform)
        self._run = jax.jit(_chain, static_argnums=1)
        self._matmuls = matmuls
        value = jnp.full((side, side), 1.0 / side, jnp.dtype(dtype))
        self._inputs = [jax.device_put(value, device) for device in devices]
        self._times = RecentTimes()
        self._time()  # compiles for each device: no measure includes it

    def measure(self) -> float:
        """Runs the probe; the median of the last PROBE_KEPT probes' times, this one's included."""
        return self._times.add(self._time())

    def _time(self) -> float:
        """Seconds from starting the probe on every device to the last one's result."""
        begin = time.perf_counter()
        jax.block_until_ready([self._run(x, self._matmuls) for x in self._inputs])
        return time.perf_counter() - begin


class LinkProbe:
    """The link probe: a signal of this node's network link that collectives cannot equalise.

    A slow link (a NIC that trained down, a bad cable, a congested uplink) makes every collective of
    the gang slow, so every rank's step time is the same and every rank's compute probe is normal.
    Here the nodes exchange a fixed buffer in pairs, a few rounds of a round-robin tournament
    (contract.health.link_rounds), each pair in its own collective-permute with no collective across
    pairs, so a round takes a pair as long as its own link needs (the rounds start together: a
    barrier before each, not timed). This process's time is the fastest of its rounds: a node whose
    link is slow is slow in all of them, every other node in at most one (its round with that
    node). Process l of a node exchanges with process l of the other node, each of its devices with
    the device of the same local index.

    It needs three nodes or more (with two, both are slow in the one round); `measure` returns the
    median of the last PROBE_KEPT times, None where there are fewer nodes. Every process must call
    it at the same step: the rounds are collectives of the whole mesh.
    """

    def __init__(self, processes_per_node: int = 1):
        self._rounds: list[tuple[Callable, bool]] = []
        self._times = RecentTimes()
        rounds = link_rounds(jax.process_count() // processes_per_node)
        if not rounds:
            return
        devices = sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
        positions: dict[int, list[int]] = {}  # each process's devices' places in the mesh
        for position, device in enumerate(devices):
            positions.setdefault(device.process_index, []).append(position)
        mesh = Mesh(np.array(devices), ("link",))
        sharded = PartitionSpec("link")
        mine = positions[jax.process_index()]
        self._input = jax.make_array_from_process_local_data(
            NamedSharding(mesh, sharded), np.ones(len(mine) * link_probe_bytes(devices[0].platform) // 4, np.float32)
        )
        node = jax.process_index() // processes_per_node
        for pairs in rounds:
            perm = []
            for a, b in pairs:
                for offset in range(processes_per_node):
                    ours, theirs = (positions[n * processes_per_node + offset] for n in (a, b))
                    for x, y in zip(ours, theirs, strict=True):
                        perm += [(x, y), (y, x)]
            exchange = partial(jax.lax.ppermute, axis_name="link", perm=perm)
            run = jax.jit(jax.shard_map(exchange, mesh=mesh, in_specs=sharded, out_specs=sharded))
            self._rounds.append((run, any(node in pair for pair in pairs)))
        # A round starts when every process has ended the one before: a node that sat a round out
        # must not start the next and wait there for a partner still in its slow round.
        together = partial(jax.lax.psum, axis_name="link")
        self._barrier = jax.jit(
            jax.shard_map(lambda x: together(x[:1]), mesh=mesh, in_specs=sharded, out_specs=PartitionSpec())
        )
        self._time()  # compiles each round and opens its connections: no measure includes that

    def measure(self) -> float | None:
        """Runs every round; the median of the last PROBE_KEPT link times, this one's included."""
        if not self._rounds:
            return None
        played = [seconds for seconds, (_, plays) in zip(self._time(), self._rounds, strict=True) if plays]
        return self._times.add(min(played))

    def _time(self) -> list[float]:
        """Seconds of each round, from starting it to this process's result."""
        times = []
        for run, _ in self._rounds:
            jax.block_until_ready(self._barrier(self._input))
            begin = time.perf_counter()
            jax.block_until_ready(run(self._input))
            times.append(time.perf_counter() - begin)
        return times
