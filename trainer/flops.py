"""Model FLOPs per token and peak device FLOP/s, for MFU.

Per trained token (forward + backward = 3x forward), with N the parameters that take part in
matmuls (every layer weight plus the vocabulary projection; the embedding lookup is free):
  full   convention: 6 N + 12 L H Q T   (every query attends to all T keys)
  causal convention: 6 N +  6 L H Q T   (causal masking halves the attention matmuls)
L layers, H query heads, Q head dim, T sequence length.
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp

from . import podenv
from .presets import ModelDims

# Dense bf16 peak FLOP/s per device, matched against `jax.Device.device_kind`.
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "B200": 2250e12, "A100": 312e12}


def matmul_params(dims: ModelDims) -> int:
    return dims.non_embedding_param_count() + dims.vocab * dims.hidden


def flops_per_token(dims: ModelDims, sequence_length: int, convention: str) -> float:
    attention_full = 12 * dims.layers * dims.heads * dims.head_dim * sequence_length
    attention = {"full": attention_full, "causal": attention_full / 2}[convention]
    return 6 * matmul_params(dims) + attention


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


def peak_flops(device: jax.Device) -> float:
    """LONGCTX_PEAK_FLOPS if set, else the table by device kind, else measured (CPU)."""
    if os.environ.get(podenv.PEAK_FLOPS):
        return float(os.environ[podenv.PEAK_FLOPS])
    for kind, flops in PEAK_BF16_FLOPS.items():
        if kind in device.device_kind.upper():
            return flops
    return measured_peak_flops(device)
