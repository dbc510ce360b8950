"""The fp32 oracle: plain softmax attention on global (unsharded) arrays, one device."""

from __future__ import annotations

import jax.numpy as jnp


def reference_attention(q, k, v, *, causal: bool, segments=None):
    """softmax(q k^T / sqrt(d)) v in fp32, tokens in natural order.

    `segments` [batch, seq]: document ids of packed documents; a token sees only its own document.

    q: [batch, seq, heads, head_dim]; k, v: [batch, seq, kv_heads, head_dim] with heads % kv_heads == 0.
    K/V heads are repeated explicitly: this is the oracle, clarity over memory.
    """
    q, k, v = (x.astype(jnp.float32) for x in (q, k, v))
    group = q.shape[2] // k.shape[2]
    k = jnp.repeat(k, group, axis=2)
    v = jnp.repeat(v, group, axis=2)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) / jnp.sqrt(jnp.float32(q.shape[-1]))
    if causal:
        t, s = logits.shape[-2:]
        logits = jnp.where(jnp.tril(jnp.ones((t, s), bool)), logits, -jnp.inf)
    if segments is not None:
        same_document = segments[:, None, :, None] == segments[:, None, None, :]
        logits = jnp.where(same_document, logits, -jnp.inf)
    weights = jnp.exp(logits - logits.max(-1, keepdims=True))
    weights = weights / weights.sum(-1, keepdims=True)
    return jnp.einsum("bhts,bshd->bthd", weights, v)
