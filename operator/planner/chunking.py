"""The FPDT offload chunk rule.

With offload, a device's sequence shard is processed in chunks; K/V chunks that are not in use
wait in host memory and are fetched over the host link while the previous chunk's attention
runs. A fetch is hidden when one chunk-by-chunk attention block takes at least as long as moving
one K/V chunk:

    compute(c)  = 4 * c^2 * (H*Q / tensor) / achievable_flops          (QK^T and AV, forward)
    transfer(c) = 2 * c * (kv_dim / tensor) * bytes / achievable_host_link

Compute grows with c^2 and transfer with c, so the rule gives a lower bound
c >= achievable_flops * kv_dim * bytes / (2 * H*Q * achievable_host_link). Larger chunks mean
fewer, bigger kernels and fewer transfers but a larger working set, so the planner takes the
largest power of two dividing the shard that still fits in memory, and never goes below the
covering bound or MIN_CHUNK_TOKENS (below ~1K tokens attention kernels stop filling the GPU).
"""

from __future__ import annotations

import math

from longctx_trainer.contract.hardware import Gpu
from longctx_trainer.contract.model import ModelConfig

from .costs import dtype_bytes, kv_dim

MIN_CHUNK_TOKENS = 1024


def chunk_compute_seconds(model: ModelConfig, gpu: Gpu, tensor: int, chunk: int) -> float:
    """Forward attention of one query chunk against one K/V chunk (an unmasked block)."""
    return 4 * chunk * chunk * (model.hidden // tensor) / gpu.achievable_flops


def chunk_transfer_seconds(model: ModelConfig, gpu: Gpu, tensor: int, precision: str, chunk: int) -> float:
    """Moving one chunk of K and V between host and device."""
    return 2 * chunk * (kv_dim(model) // tensor) * dtype_bytes(precision) / gpu.achievable_host_link


def covering_chunk_tokens(model: ModelConfig, gpu: Gpu, precision: str) -> int:
    """Smallest whole chunk whose attention compute covers its host transfer (tensor cancels)."""
    bound = (
        gpu.achievable_flops * kv_dim(model) * dtype_bytes(precision) / (2 * model.hidden * gpu.achievable_host_link)
    )
    return math.ceil(bound)


def chunk_candidates(shard_tokens: int, minimum: int) -> list[int]:
    """Powers of two dividing the shard, at least max(minimum, MIN_CHUNK_TOKENS), largest first."""
    floor = max(minimum, MIN_CHUNK_TOKENS)
    out = []
    chunk = 1
    while chunk <= shard_tokens:
        if chunk >= floor and shard_tokens % chunk == 0:
            out.append(chunk)
        chunk *= 2
    return sorted(out, reverse=True)
