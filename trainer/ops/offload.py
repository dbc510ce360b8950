"""Where idle attention data lives: host memory when the backend offers a host memory kind.

`jax.device_put(x, jax.memory.Space.Host)` inside a jitted function is an annotation that XLA
turns into asynchronous device<->host copies (TransferToMemoryKind semantics). On GPU the host
kind is "pinned_host" (page-locked, DMA-able), so a copy issued one loop iteration ahead
overlaps the current iteration's compute (double buffering). On CPU, device memory already *is*
host memory: placement is the identity and the numerics are the same code path's.
"""

from __future__ import annotations

import functools

import jax

HOST_KIND = "pinned_host"


@functools.cache
def host_offload_available(platform: str | None = None) -> bool:
    """True when the backend's devices expose a separate pinned host memory to move data to."""
    platform = platform or jax.default_backend()
    if platform == "cpu":
        return False
    device = jax.devices(platform)[0]
    kinds = {memory.kind for memory in device.addressable_memories()}
    return HOST_KIND in kinds and device.default_memory().kind != HOST_KIND


def to_host(x, enabled: bool):
    """Move `x` to host memory if `enabled` and the backend has one; otherwise `x` unchanged."""
    if enabled and host_offload_available():
        return jax.device_put(x, jax.memory.Space.Host)
    return x


def to_device(x, enabled: bool):
    """Inverse of `to_host`: bring `x` back to device memory for compute."""
    if enabled and host_offload_available():
        return jax.device_put(x, jax.memory.Space.Device)
    return x
