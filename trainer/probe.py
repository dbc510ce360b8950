"""The compute probe: a signal of this process's own speed that collectives cannot equalise.

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
from collections.abc import Sequence

import jax
import jax.numpy as jnp

from .contract.health import RecentTimes, probe_work


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
