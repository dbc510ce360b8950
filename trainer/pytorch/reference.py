"""The fp32 oracle for the PyTorch ring attention: plain causal softmax attention on whole
(unsharded) tensors in one process, K/V heads repeated explicitly for clarity over memory."""

from __future__ import annotations

import math

import torch


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal softmax(q k^T / sqrt(d)) v in fp32.

    q: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim], heads % kv_heads == 0.
    """
    q, k, v = (x.float() for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k = k.repeat_interleave(group, dim=2)
    v = v.repeat_interleave(group, dim=2)
    logits_BxHxTxS = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(q.shape[-1])
    t = q.shape[1]
    visible = torch.ones(t, t, dtype=torch.bool).tril()
    logits_BxHxTxS = logits_BxHxTxS.masked_fill(~visible, float("-inf"))
    return torch.einsum("bhts,bshd->bthd", logits_BxHxTxS.softmax(-1), v)
