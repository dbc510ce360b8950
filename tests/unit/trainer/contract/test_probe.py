"""trainer/probe.py: the compute probe runs on every given device, with no collective, and its
time is the median of its last PROBE_KEPT runs."""

import jax

from longctx_trainer import probe
from longctx_trainer.contract.health import probe_work


def test_the_probe_time_is_the_median_of_the_last_runs():
    class Scripted(probe.ComputeProbe):
        times = iter([9.0, 1.0, 50.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # the first: the compiling run

        def _time(self):
            return next(self.times)

    scripted = Scripted(jax.devices()[:2])
    assert [scripted.measure() for _ in range(7)] == [1.0, 25.5, 2.0, 2.5, 3.0, 4.0, 4.0]


def test_the_probe_runs_on_each_device_without_a_collective():
    devices = jax.devices()[:2]
    real = probe.ComputeProbe(devices)
    assert real.measure() > 0
    assert [x.devices() for x in real._inputs] == [{d} for d in devices]
    _, matmuls, _ = probe_work("cpu")
    hlo = jax.jit(probe._chain, static_argnums=1).lower(real._inputs[0], matmuls).as_text()
    assert not any(op in hlo for op in ("all-reduce", "all-gather", "collective-permute", "all-to-all"))
