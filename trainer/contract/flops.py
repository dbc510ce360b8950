"""Model FLOPs per trained token, for the trainer's MFU and the planner's estimates (no JAX).

Per trained token (forward + backward = 3x forward), with N the parameters that take part in
matmuls (every layer weight plus the vocabulary projection; the embedding lookup is free):
  full   convention: 6 N + 12 L H Q T   (every query attends to all T keys; PaLM's)
  causal convention: 6 N +  6 L H Q T   (causal masking halves the attention matmuls)
L layers, H query heads, Q head dim, T sequence length.
With packed documents under a document mask, the causal convention counts only the query-key
pairs within documents, sum over documents of l^2 / 2 per sequence (T^2 / 2 for one document):
6 L H Q T becomes 12 L H Q (sum l^2 / 2) / T, the attention work actually needed. The full
convention is unchanged (every query against all T keys).
"""

from __future__ import annotations

from dataclasses import dataclass

from .model import ModelConfig


def matmul_params(model: ModelConfig) -> int:
    """N of the 6N rule: every layer weight plus the LM head. The input embedding is a table
    lookup (no FLOPs); a tied table still does the LM-head matmul, so it is counted once."""
    return model.non_embedding_param_count() + model.vocab * model.hidden


@dataclass(frozen=True)
class FlopsPerToken:
    """Model FLOPs per trained token (forward + backward, no recomputation)."""

    dense: int  # 6N
    attention_causal: int  # 6*L*H*Q*T: scores and values over a causal mask
    attention_full: int  # 12*L*H*Q*T: the same without the mask

    @property
    def causal(self) -> int:
        return self.dense + self.attention_causal

    @property
    def full(self) -> int:
        return self.dense + self.attention_full

    def by_convention(self) -> dict[str, int]:
        """Both totals by convention name, the `convention` label of the MFU metric."""
        return {"causal": self.causal, "full": self.full}


def flops_per_token(model: ModelConfig, sequence_length: int, causal_pairs: float | None = None) -> FlopsPerToken:
    """`causal_pairs`: query-key pairs per sequence that the mask leaves (packed documents:
    `causal_pairs_within_documents`); None: the causal mask's T^2 / 2."""
    # H*Q = heads * head_dim = hidden (GQA shares K/V heads but every query head still does
    # its own QK^T and AV products).
    per_pair = 12 * model.layers * model.heads * model.head_dim
    attention_full = per_pair * sequence_length
    causal = attention_full // 2 if causal_pairs is None else round(per_pair * causal_pairs / sequence_length)
    return FlopsPerToken(dense=6 * matmul_params(model), attention_causal=causal, attention_full=attention_full)


def causal_pairs_within_documents(positions):
    """Sum over documents of l^2 / 2, from each token's position within its document (numpy or
    JAX arrays, summed over all axes): a document's positions 0..l-1 add up to l^2 / 2 - l / 2."""
    return (positions + 0.5).sum()
