"""Worker of the ring-attention tests: one rank's shard of seeded q, k, v, its ring forward and
its gradients (tests/unit/trainer_torch/test_ring.py)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from longctx_trainer.pytorch.ring import Ring, ring_attention


def inputs(batch: int, seq: int, heads: int, kv_heads: int, head_dim: int) -> dict[str, torch.Tensor]:
    """The whole sequence's q, k, v and the output gradient, the same in every process."""
    g = torch.Generator().manual_seed(0)
    return {
        "q": torch.randn(batch, seq, heads, head_dim, generator=g),
        "k": torch.randn(batch, seq, kv_heads, head_dim, generator=g),
        "v": torch.randn(batch, seq, kv_heads, head_dim, generator=g),
        "dout": torch.randn(batch, seq, heads, head_dim, generator=g),
    }


def ring_shards(rank: int, shapes: list[tuple[int, ...]]) -> list[dict[str, torch.Tensor]]:
    """ring_shard of each shape, in one process group (a spawn costs seconds)."""
    return [ring_shard(rank, shape) for shape in shapes]


def ring_shard(rank: int, shape: tuple[int, ...]) -> dict[str, torch.Tensor]:
    x = inputs(*shape)
    cp = dist.get_world_size()
    shard = shape[1] // cp
    local = {name: t[:, rank * shard : (rank + 1) * shard].clone() for name, t in x.items()}
    q, k, v = (local[n].requires_grad_() for n in ("q", "k", "v"))
    out = ring_attention(q, k, v, Ring(dist.group.WORLD))
    out.backward(local["dout"])
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
