"""Worker of the ring-attention tests: one rank's shard of seeded q, k, v in a load-balance layout,
its ring forward and its gradients (tests/unit/trainer/pytorch/test_ring.py)."""

from __future__ import annotations

import torch
import torch.distributed as dist

from longctx_trainer.contract.load_balance import permutation
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


def positions(seq: int, cp: int, scheme: str) -> torch.Tensor:
    """Every rank's token positions [cp, seq/cp] in the scheme's layout."""
    return torch.from_numpy(permutation(seq, cp, scheme)).reshape(cp, -1)


def ring_shards(rank: int, cases: list[tuple[tuple[int, ...], str]]) -> list[dict[str, torch.Tensor]]:
    """ring_shard of each (shape, scheme), in one process group (a spawn costs seconds)."""
    return [ring_shard(rank, shape, scheme) for shape, scheme in cases]


def ring_shard(rank: int, shape: tuple[int, ...], scheme: str = "none") -> dict[str, torch.Tensor]:
    x = inputs(*shape)
    cp = dist.get_world_size()
    ring = Ring(dist.group.WORLD, positions(shape[1], cp, scheme))
    mine = ring.positions_CxT[rank]
    local = {name: t[:, mine].clone() for name, t in x.items()}
    q, k, v = (local[n].requires_grad_() for n in ("q", "k", "v"))
    out = ring_attention(q, k, v, ring)
    out.backward(local["dout"])
    return {"out": out.detach(), "dq": q.grad, "dk": k.grad, "dv": v.grad}
