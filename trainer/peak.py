"""Peak FLOP/s of the device the trainer runs on: the denominators of MFU."""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp

from .contract import podenv
from .contract.hardware import gpu_of_device_kind


def measured_peak_flops(device: jax.Device, size: int = 512, repeats: int = 5) -> float:
    """Best observed FLOP/s of an fp32 matmul on `device` (the CPU stand-in for a spec sheet)."""
    a = jax.device_put(jnp.ones((size, size), jnp.float32), device)
    matmul = jax.jit(lambda x: x @ x)
    matmul(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a).block_until_ready()
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def fp8_peak_flops(device: jax.Device) -> float | None:
    """The catalogue's dense FP8 peak of the GPU; None where it has none (or is no GPU: FP8 on a
    CPU is emulated and has no peak of its own)."""
    gpu = gpu_of_device_kind(device.device_kind)
    return gpu.fp8_flops if gpu else None


def peak_flops(device: jax.Device) -> float:
    """LONGCTX_PEAK_FLOPS if set, else the catalogue's dense bf16 peak of the GPU, else measured
    (CPU)."""
    if os.environ.get(podenv.PEAK_FLOPS):
        return float(os.environ[podenv.PEAK_FLOPS])
    gpu = gpu_of_device_kind(device.device_kind)
    return gpu.bf16_flops if gpu else measured_peak_flops(device)
