"""A Llama-style decoder in PyTorch: RMSNorm, rotary positions, grouped-query attention (ring
attention over the context-parallel group), SwiGLU MLP, optionally tied embeddings.

Dimensions come from the trainer config's model (the same presets as the JAX trainer). Each rank
holds a shard of every sequence, the tokens at the positions its ring gives it (the load-balance
layout): RoPE and the causal mask use those true positions. Computes in fp32.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

from ..contract.config import ModelConfig
from ..contract.model import RMS_NORM_EPS
from .ring import Ring, ring_attention


def rope(x_BxTxHxD: torch.Tensor, positions_T: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding, rotating the two halves of each head (Hugging Face Llama's convention)."""
    half = x_BxTxHxD.shape[-1] // 2
    freqs = theta ** (-torch.arange(half, dtype=torch.float32) / half)
    angles_TxD = torch.cat([positions_T[:, None].float() * freqs] * 2, dim=-1)
    cos, sin = angles_TxD.cos()[None, :, None], angles_TxD.sin()[None, :, None]
    rotated = torch.cat([-x_BxTxHxD[..., half:], x_BxTxHxD[..., :half]], dim=-1)
    return x_BxTxHxD * cos + rotated * sin


class Block(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = m.heads, m.kv_heads, m.hidden // m.heads
        self.theta = m.rope_theta
        self.attention_norm = nn.RMSNorm(m.hidden, eps=RMS_NORM_EPS)
        self.wq = nn.Linear(m.hidden, m.heads * self.head_dim, bias=False)
        self.wk = nn.Linear(m.hidden, m.kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(m.hidden, m.kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(m.heads * self.head_dim, m.hidden, bias=False)
        self.mlp_norm = nn.RMSNorm(m.hidden, eps=RMS_NORM_EPS)
        self.w_gate = nn.Linear(m.hidden, m.ffn, bias=False)
        self.w_up = nn.Linear(m.hidden, m.ffn, bias=False)
        self.w_down = nn.Linear(m.ffn, m.hidden, bias=False)

    def forward(self, x_BxTxE: torch.Tensor, positions_T: torch.Tensor, ring: Ring) -> torch.Tensor:
        b, t, _ = x_BxTxE.shape
        h = self.attention_norm(x_BxTxE)
        q = rope(self.wq(h).view(b, t, self.heads, self.head_dim), positions_T, self.theta)
        k = rope(self.wk(h).view(b, t, self.kv_heads, self.head_dim), positions_T, self.theta)
        v = self.wv(h).view(b, t, self.kv_heads, self.head_dim)
        x_BxTxE = x_BxTxE + self.wo(ring_attention(q, k, v, ring).reshape(b, t, -1))
        h = self.mlp_norm(x_BxTxE)
        return x_BxTxE + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Llama(nn.Module):
    def __init__(self, m: ModelConfig):
        super().__init__()
        self.embed = nn.Embedding(m.vocab, m.hidden)
        self.blocks = nn.ModuleList(Block(m) for _ in range(m.layers))
        self.final_norm = nn.RMSNorm(m.hidden, eps=RMS_NORM_EPS)
        self.lm_head = None if m.tie_embeddings else nn.Linear(m.hidden, m.vocab, bias=False)
        self._init(m.layers)

    def _init(self, layers: int) -> None:
        """N(0, 0.02) matrices, residual outputs scaled by 1/sqrt(2 layers), unit norms (as the JAX trainer)."""
        for name, p in self.named_parameters():
            if "norm" in name:
                nn.init.ones_(p)
            else:
                scale = 1 / math.sqrt(2 * layers) if name.endswith(("wo.weight", "w_down.weight")) else 1.0
                nn.init.normal_(p, std=0.02 * scale)

    def forward(self, tokens_BxT: torch.Tensor, ring: Ring) -> torch.Tensor:
        """Logits [B, T, vocab] of this rank's shard of the sequences."""
        positions_T = ring.positions_CxT[ring.index]
        x = self.embed(tokens_BxT)
        for block in self.blocks:
            x = block(x, positions_T, ring)
        x = self.final_norm(x)
        return x @ self.embed.weight.T if self.lm_head is None else self.lm_head(x)
