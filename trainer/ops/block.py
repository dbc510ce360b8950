"""One (query block, key/value block) step of attention, returning the output and its log-sum-exp.

Everything a ring or chunk loop needs: the forward of one block pair, the merge of two partial
results (online softmax), and the backward of one block pair given the *final* log-sum-exp.
Softmax statistics (max, sum, lse) and accumulations are fp32 whatever the input dtype.

GQA without repeating K/V: queries are viewed as [batch, tokens, kv_heads, group, head_dim] and
contracted against K/V directly; dK/dV sum over the group inside the einsum.

Masking is by true token positions (`q_pos[t] >= k_pos[s]`), so one kernel serves every
load-balancing layout, and, for packed documents, by document ids (`q_seg[b, t] == k_seg[b, s]`:
a token sees only its own document). A row that sees no key (possible in one block, never in the
final result, where every token sees itself) gets output 0 and lse -inf.

cuDNN: on GPU, a block without a mask (the "full" case) runs cuDNN flash attention
(ops/cudnn_compat.py: the primitive behind `jax.nn.dot_product_attention(implementation="cudnn")`),
asking for its softmax statistics, which cuDNN keeps in fp32 (the public wrapper casts them to the
input dtype, too coarse for merging ring steps). Masked blocks and the backward here use the
pure-JAX path; the causal dual-chunk-swap ring runs cuDNN forward and backward for every step
(ops/block_kernel.py, ops/ring.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from . import cudnn_compat

F32 = jnp.float32


def _grouped(x, kv_heads):
    """[b, t, heads, d] -> [b, t, kv_heads, group, d]."""
    b, t, h, d = x.shape
    return x.reshape(b, t, kv_heads, h // kv_heads, d)


def visible(q_pos, k_pos, q_seg, k_seg):
    """Which keys each query sees, [b or 1, t, s], or None when it sees them all: keys not in its
    future (positions [t], [s]; None = not causal) and of its own document (ids [b, t], [b, s];
    None = one document)."""
    mask = None if q_pos is None else (q_pos[:, None] >= k_pos[None, :])[None]
    if q_seg is not None:
        same = q_seg[:, :, None] == k_seg[:, None, :]
        mask = same if mask is None else mask & same
    return mask


def _rows(x, kv_heads):
    """[b, t, heads, d] -> [b, kv_heads, group * t, d]: each K/V head's queries as one row block.

    Every product here is then a plain batched matrix product over (b, kv_heads). XLA's CPU
    backend ran the grouped 5-D contractions ("btkgd,bskd->bkgts") 2-3x slower than this layout
    (512-token blocks, 2 query heads per K/V head, 2026-11-26); the transposes touch only
    O(t x d) elements, against the O(t x s) of the logits."""
    b, t, h, d = x.shape
    return jnp.transpose(_grouped(x, kv_heads), (0, 2, 3, 1, 4)).reshape(b, kv_heads, h // kv_heads * t, d)


def _unrows(x, heads):
    """Inverse of `_rows`: [b, kv_heads, group * t, d] -> [b, t, heads, d]."""
    b, kh, r, d = x.shape
    return jnp.transpose(x.reshape(b, kh, heads // kh, r * kh // heads, d), (0, 3, 1, 2, 4)).reshape(b, -1, heads, d)


def _heads_major(x):
    """[b, s, kv_heads, d] <-> [b, kv_heads, s, d]."""
    return jnp.transpose(x, (0, 2, 1, 3))


def _masked_logits(q, k, q_pos, k_pos, scale, q_seg=None, k_seg=None):
    """Logits [b, kv_heads, group, t, s] in fp32, -inf where the query must not see the key."""
    b, t, h, _ = q.shape
    kv_heads = k.shape[2]
    logits = jnp.einsum("bkrd,bksd->bkrs", _rows(q, kv_heads), _heads_major(k), preferred_element_type=F32)
    logits = logits.reshape(b, kv_heads, h // kv_heads, t, -1) * F32(scale)
    mask = visible(q_pos, k_pos, q_seg, k_seg)
    if mask is not None:
        logits = jnp.where(mask[:, None, None], logits, -jnp.inf)
    return logits


def _to_btH(x):
    """[b, kv_heads, group, t] -> [b, t, heads]."""
    b, kh, g, t = x.shape
    return jnp.transpose(x, (0, 3, 1, 2)).reshape(b, t, kh * g)


def _from_btH(x, kv_heads):
    """[b, t, heads] -> [b, kv_heads, group, t]."""
    b, t, h = x.shape
    return jnp.transpose(x.reshape(b, t, kv_heads, h // kv_heads), (0, 2, 3, 1))


def block_forward(q, k, v, q_pos=None, k_pos=None, *, scale, q_seg=None, k_seg=None):
    """(out fp32 [b, t, heads, d], lse fp32 [b, t, heads]) of q attending to this K/V block.

    Pass positions for a causal mask and document ids for a document mask; None means every key
    is visible.
    """
    if q_pos is None and q_seg is None and _cudnn_usable(q, k):
        return _cudnn_forward(q, k, v, scale=scale)
    logits = _masked_logits(q, k, q_pos, k_pos, scale, q_seg, k_seg)
    row_max = logits.max(-1)
    row_max = jnp.where(jnp.isfinite(row_max), row_max, 0.0)
    probs = jnp.exp(logits - row_max[..., None])
    row_sum = probs.sum(-1)
    seen = row_sum > 0
    b, kv_heads, group, t, s = probs.shape
    out = jnp.einsum(
        "bkrs,bksd->bkrd",
        probs.astype(v.dtype).reshape(b, kv_heads, group * t, s),
        _heads_major(v),
        preferred_element_type=F32,
    )
    out = out / jnp.where(seen, row_sum, 1.0).reshape(b, kv_heads, group * t)[..., None]
    lse = jnp.where(seen, row_max + jnp.log(jnp.where(seen, row_sum, 1.0)), -jnp.inf)
    return _unrows(out, q.shape[2]), _to_btH(lse)


def merge_partials(out, lse, block_out, block_lse):
    """Combine two softmax-normalised partial results over disjoint key sets (fp32)."""
    new_lse = jnp.logaddexp(lse, block_lse)
    safe = jnp.where(jnp.isfinite(new_lse), new_lse, 0.0)
    w_old = jnp.exp(lse - safe)[..., None]
    w_new = jnp.exp(block_lse - safe)[..., None]
    return out * w_old + block_out * w_new, new_lse


def block_backward(q, k, v, do, lse, delta, q_pos=None, k_pos=None, *, scale, q_seg=None, k_seg=None):
    """(dq, dk, dv) in fp32 of this block's share of the attention, given the final lse and
    delta = sum(dO * O, -1) over the whole key range (flash-attention backward)."""
    kv_heads = k.shape[2]
    logits = _masked_logits(q, k, q_pos, k_pos, scale, q_seg, k_seg)
    lse_g = _from_btH(lse, kv_heads)
    lse_g = jnp.where(jnp.isfinite(lse_g), lse_g, jnp.inf)
    b, _, group, t, s = logits.shape
    probs = jnp.exp(logits - lse_g[..., None]).reshape(b, kv_heads, group * t, s)
    do_r = _rows(do, kv_heads)
    dv = jnp.einsum("bkrs,bkrd->bksd", probs.astype(do.dtype), do_r, preferred_element_type=F32)
    dprobs = jnp.einsum("bkrd,bksd->bkrs", do_r, _heads_major(v), preferred_element_type=F32)
    delta_r = _from_btH(delta, kv_heads).reshape(b, kv_heads, group * t)
    dlogits = probs * (dprobs - delta_r[..., None]) * F32(scale)
    dq = jnp.einsum("bkrs,bksd->bkrd", dlogits.astype(k.dtype), _heads_major(k), preferred_element_type=F32)
    dk = jnp.einsum("bkrs,bkrd->bksd", dlogits.astype(q.dtype), _rows(q, kv_heads), preferred_element_type=F32)
    return _unrows(dq, q.shape[2]), _heads_major(dk), _heads_major(dv)


def _cudnn_usable(q, k) -> bool:
    return attention_kernel(q.dtype, q.shape[-1])[0] == "cudnn"


def cudnn_unsuitable(dtype, head_dim: int) -> str | None:
    """Why cuDNN flash attention cannot take inputs of this dtype and head size, or None."""
    if jnp.dtype(dtype) not in (jnp.bfloat16, jnp.float16):
        return f"{jnp.dtype(dtype).name}: cuDNN flash attention takes bf16/fp16"
    if head_dim % 8 or head_dim > 128:
        return f"head size {head_dim}: cuDNN needs a multiple of 8, at most 128"
    if not cudnn_compat.available():
        return "this JAX has no cuDNN fused attention (jax._src.cudnn.fused_attention_stablehlo)"
    return None


def attention_kernel(dtype, head_dim: int) -> tuple[str, str]:
    """("cudnn" or "jax", why) for unmasked blocks of this dtype and head size on this backend: the
    kernel block_forward and the ring's block kernel (ops/block_kernel.py) use. The trainer reports
    it once at start, so a silent fallback shows."""
    if jax.default_backend() != "gpu":
        return "jax", f"backend {jax.default_backend()}: cuDNN needs a GPU"
    why_not = cudnn_unsuitable(dtype, head_dim)
    if why_not:
        return "jax", why_not
    return "cudnn", "bf16/fp16 on GPU with a supported head size"


def _cudnn_forward(q, k, v, *, scale):
    out, lse = cudnn_compat.flash_forward(q, k, v, scale=scale, causal=False)
    return out.astype(F32), lse
