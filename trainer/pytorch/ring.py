"""Ring attention over a context-parallel process group, exact and causal, with GQA.

Each rank of the group holds one shard of every sequence, laid out by the job's load-balance
scheme (trainer/contract/load_balance.py, as in the JAX trainer): with dual_chunk_swap (the default) rank c
holds chunks c and 2C-1-c of 2C, so under the causal mask every rank does the same work; with
none it holds chunk c, and the last rank does C times the first's work. The ring knows every
rank's true token positions, from which each block's causal mask follows.

Forward: C steps. At step s a rank holds the K/V shard of rank (c - s) mod C, already sending it
on to the next rank (isend/irecv, overlapped with the compute); a block whose keys all lie in the
queries' future is skipped, one wholly in their past needs no mask. Partial results merge by
online softmax: each block's output and log-sum-exp (lse) are combined in fp32.

Backward (a torch.autograd.Function: autograd cannot see through point-to-point sends): K/V go
around the ring again with fp32 dK/dV accumulators travelling beside them; each rank adds its
queries' contribution to the shard it holds, and one last shift brings every accumulator home.
dQ stays put. Saved for backward: the local q, k, v, out and lse.
"""

from __future__ import annotations

import math

import torch
import torch.distributed as dist


class Ring:
    """A rank's place in its context-parallel group: the global ranks it sends to and hears from,
    and the true positions of every rank's tokens (`positions_CxT`, row c for group rank c)."""

    def __init__(self, group: dist.ProcessGroup | None, positions_CxT: torch.Tensor):
        self.group = group
        self.size = dist.get_world_size(group) if group is not None else 1
        self.index = dist.get_rank(group) if group is not None else 0
        if positions_CxT.shape[0] != self.size:
            raise ValueError(f"positions for {positions_CxT.shape[0]} ranks, the ring has {self.size}")
        self.positions_CxT = positions_CxT
        if self.size > 1:
            ranks = dist.get_process_group_ranks(group)
            self.next = ranks[(self.index + 1) % self.size]
            self.prev = ranks[(self.index - 1) % self.size]

    def shift(self, tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], list[dist.Work]]:
        """Start sending each tensor to the next rank and receiving the previous rank's; returns
        the receive buffers and the requests to wait on."""
        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t.contiguous(), self.next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, r, self.prev, self.group) for r in received]
        return received, dist.batch_isend_irecv(ops)


def _wait(requests: list[dist.Work]) -> None:
    for request in requests:
        request.wait()


def visible(q_positions_T: torch.Tensor, k_positions_S: torch.Tensor) -> torch.Tensor | None:
    """The causal mask [T, S] of a block; None when every key is visible to every query."""
    mask = k_positions_S[None, :] <= q_positions_T[:, None]
    return None if bool(mask.all()) else mask


def _logits(q_BxKxGxTxD, k_BxKxSxD, scale: float, mask_TxS: torch.Tensor | None) -> torch.Tensor:
    logits = torch.einsum("bkgtd,bksd->bkgts", q_BxKxGxTxD, k_BxKxSxD) * scale
    return logits if mask_TxS is None else logits.masked_fill(~mask_TxS, float("-inf"))


def _finite(lse: torch.Tensor) -> torch.Tensor:
    """lse with -inf (a query that sees no key yet) as 0, so exp(-inf - lse) is 0, never nan."""
    return torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))


def _block_forward(q, k, v, scale, mask):
    """One block's normalised output [B,K,G,T,D] and log-sum-exp [B,K,G,T] (-inf: no key seen)."""
    logits = _logits(q, k, scale, mask)
    lse = torch.logsumexp(logits, dim=-1)
    out = torch.einsum("bkgts,bksd->bkgtd", torch.exp(logits - _finite(lse)[..., None]), v)
    return out, lse


def _merge(out, lse, block_out, block_lse):
    """Online softmax: the partials of two disjoint key sets as one (either lse may be -inf)."""
    new_lse = torch.logaddexp(lse, block_lse)
    base = _finite(new_lse)[..., None]
    out = out * torch.exp(lse[..., None] - base) + block_out * torch.exp(block_lse[..., None] - base)
    return out, new_lse


def _grouped(q_BxTxHxD: torch.Tensor, kv_heads: int) -> torch.Tensor:
    b, t, h, d = q_BxTxHxD.shape
    return q_BxTxHxD.reshape(b, t, kv_heads, h // kv_heads, d).permute(0, 2, 3, 1, 4)


def _ungrouped(x_BxKxGxTxD: torch.Tensor) -> torch.Tensor:
    b, k, g, t, d = x_BxKxGxTxD.shape
    return x_BxKxGxTxD.permute(0, 3, 1, 2, 4).reshape(b, t, k * g, d)


class RingAttention(torch.autograd.Function):
    """Causal attention of this rank's query shard over the whole sequence's K/V (see module)."""

    @staticmethod
    def forward(ctx, q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, ring: Ring):
        kv_heads = k_BxTxKxD.shape[2]
        scale = 1.0 / math.sqrt(q_BxTxHxD.shape[-1])
        q = _grouped(q_BxTxHxD.float(), kv_heads)
        k, v = (x.float().permute(0, 2, 1, 3).contiguous() for x in (k_BxTxKxD, v_BxTxKxD))
        out = torch.zeros_like(q)
        lse = torch.full(q.shape[:-1], float("-inf"))
        q_positions = ring.positions_CxT[ring.index]
        held = [k, v]
        for step in range(ring.size):
            pending = None
            if step < ring.size - 1:
                pending = ring.shift(held)
            k_positions = ring.positions_CxT[(ring.index - step) % ring.size]
            if bool(k_positions.min() <= q_positions.max()):  # else: all keys in the queries' future
                mask = visible(q_positions, k_positions)
                block_out, block_lse = _block_forward(q, held[0], held[1], scale, mask)
                out, lse = _merge(out, lse, block_out, block_lse)
            if pending is not None:
                held, requests = pending
                _wait(requests)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.ring, ctx.scale, ctx.dtypes = ring, scale, (q_BxTxHxD.dtype, k_BxTxKxD.dtype)
        return _ungrouped(out).to(q_BxTxHxD.dtype)

    @staticmethod
    def backward(ctx, dout_BxTxHxD):
        q, k, v, out, lse = ctx.saved_tensors
        ring, scale = ctx.ring, ctx.scale
        dout = _grouped(dout_BxTxHxD.float(), k.shape[1])
        delta = (dout * out).sum(-1)  # rowsum(dO * O) [B,K,G,T]
        dq = torch.zeros_like(q)
        held = [k, v]
        dk, dv = torch.zeros_like(k), torch.zeros_like(v)  # travel with the K/V shard they belong to
        q_positions = ring.positions_CxT[ring.index]
        for step in range(ring.size):
            pending = ring.shift(held) if step < ring.size - 1 else None
            k_positions = ring.positions_CxT[(ring.index - step) % ring.size]
            if bool(k_positions.min() <= q_positions.max()):
                hk, hv = held
                logits = _logits(q, hk, scale, visible(q_positions, k_positions))
                p = torch.exp(logits - lse[..., None])
                dv = dv + torch.einsum("bkgts,bkgtd->bksd", p, dout)
                dp = torch.einsum("bkgtd,bksd->bkgts", dout, hv)
                ds = p * (dp - delta[..., None]) * scale
                dq = dq + torch.einsum("bkgts,bksd->bkgtd", ds, hk)
                dk = dk + torch.einsum("bkgts,bkgtd->bksd", ds, q)
            if ring.size > 1:
                (dk, dv), requests = ring.shift([dk, dv])  # after the last step: home
                _wait(requests)
            if pending is not None:
                held, requests = pending
                _wait(requests)
        q_dtype, kv_dtype = ctx.dtypes
        grad_k, grad_v = (x.permute(0, 2, 1, 3).to(kv_dtype) for x in (dk, dv))
        return _ungrouped(dq).to(q_dtype), grad_k, grad_v, None


def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, ring: Ring) -> torch.Tensor:
    """Causal attention of local shards q [B,T,H,D] and k, v [B,T,K,D] over the ring's sequence
    (the tokens at positions ring.positions_CxT[ring.index])."""
    return RingAttention.apply(q, k, v, ring)
