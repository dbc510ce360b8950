"""The compute probe of the PyTorch example: the JAX trainer's probe (longctx_trainer.probe), in torch.

A fixed chain of square matmuls with no collective on this rank's device, timed to its end, after
every `metrics.probe_every_steps` steps; the trainer exports the median of the last PROBE_KEPT
probes (contract/health.py) as longctx_train_probe_seconds, so the operator names a rank with a
slow CPU or GPU by it as it does for the JAX trainer (a synchronous gang's step times are equal on
every rank). The work by platform is the JAX probe's (contract.health.probe_work).
"""

from __future__ import annotations

import time

import torch

from ..contract.health import RecentTimes, probe_work


def chain(x: torch.Tensor, matmuls: int) -> torch.Tensor:
    """`matmuls` dependent products, each squashed by tanh so the values stay bounded."""
    y = x
    for _ in range(matmuls):
        y = torch.tanh(y @ x)
    return y


class ComputeProbe:
    """The probe on `device` (this rank's): `measure()` runs it and returns the probe time."""

    def __init__(self, device: torch.device):
        side, self._matmuls, dtype = probe_work(device.type)
        self._device = device
        self._input = torch.full((side, side), 1.0 / side, dtype=getattr(torch, dtype), device=device)
        self._times = RecentTimes()
        self._time()  # warms the kernels (and the CUDA context): no measure includes it

    def measure(self) -> float:
        """Runs the probe; the median of the last PROBE_KEPT probes' times, this one's included."""
        return self._times.add(self._time())

    def _time(self) -> float:
        begin = time.perf_counter()
        with torch.no_grad():
            result = chain(self._input, self._matmuls)
        if self._device.type == "cuda":
            torch.cuda.synchronize(self._device)
        result.sum().item()  # the last product is done
        return time.perf_counter() - begin
