"""Deliberately broken variants of the trainer, for tests that must fail on them.

Each function installs one mutant with pytest's `monkeypatch` (undone after the test) by
replacing a function inside the module under test; production code is not changed. A numeric
check whose tolerance lets one of these through is too loose to guard against that bug.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax import lax

from longctx_trainer import fp8, model
from longctx_trainer.ops import block, chunked, ring, token_ring, ulysses


def round_block_lse_to_bf16(monkeypatch):
    """Every block's log-sum-exp rounded to bf16 before the ring merges it: what the public cuDNN
    wrapper returns (ops/block.py's docstring)."""
    correct = chunked.block_forward

    def block_forward(*args, **kwargs):
        out, lse = correct(*args, **kwargs)
        return out, lse.astype(jnp.bfloat16).astype(jnp.float32)

    monkeypatch.setattr(chunked, "block_forward", block_forward)


def drop_causal_mask_on_first_block(monkeypatch):
    """The chunk pair holding token 0 against itself runs unmasked (forward and backward)."""
    correct = chunked._relation

    def relation(q, k):
        kind = correct(q, k)
        if q.pos is None:
            return kind
        first_block = (q.pos.min() == 0) & (k.pos.min() == 0)
        return jnp.where(first_block & (kind == chunked.MASKED), chunked.FULL, kind)

    monkeypatch.setattr(chunked, "_relation", relation)


def ignore_document_mask(monkeypatch):
    """Attention across packed documents: every block masks by position only."""
    correct = block.visible
    monkeypatch.setattr(block, "visible", lambda q_pos, k_pos, q_seg, k_seg: correct(q_pos, k_pos, None, None))


def skip_pairs_of_one_document(monkeypatch):
    """The skip decision inverted for documents: pairs whose documents differ are computed and pairs
    within one document are skipped (a wrong range test)."""
    correct = chunked._relation

    def relation(q, k):
        kind = correct(q, k)
        if q.seg is None:
            return kind
        same = jnp.all((q.seg.min(1) == k.seg.min(1)) & (q.seg.max(1) == k.seg.max(1)))
        return jnp.where(same, chunked.SKIP, kind)

    monkeypatch.setattr(chunked, "_relation", relation)


class _LaxSkippingOneRingRotation:
    """`jax.lax` as ring.py sees it, except that the ring's step loops run unrolled in Python, so
    the K/V rotation (ppermute) of one step can be left out: that step's device keeps the shard
    it had, attends it twice and never sees another one."""

    def __init__(self, skipped_step: int):
        self.skipped_step, self.step = skipped_step, None

    def __getattr__(self, name):
        return getattr(lax, name)

    def scan(self, body, carry, steps):
        for step in range(len(steps)):
            self.step = step
            carry, _ = body(carry, steps[step])
        self.step = None
        return carry, None

    def ppermute(self, x, axis_name, perm):
        return x if self.step == self.skipped_step else lax.ppermute(x, axis_name, perm)


def skip_one_ring_rotation(monkeypatch, step: int = 1):
    skipping = _LaxSkippingOneRingRotation(step)
    monkeypatch.setattr(ring, "lax", skipping)
    monkeypatch.setattr(ring, "scan", skipping.scan)  # the step loops' scan (ops/loops.py)


class _LaxReturningToTheWrongOwner:
    """`jax.lax` as token_ring.py sees it, except that every send back to the queries' owner (any
    shift but the forward +1) lands one device short, so partial results merge into the wrong rows."""

    def __getattr__(self, name):
        return getattr(lax, name)

    def ppermute(self, x, axis_name, perm):
        n = len(perm)
        if all(j == (i + 1) % n for i, j in perm):
            return lax.ppermute(x, axis_name, perm)
        return lax.ppermute(x, axis_name, [(i, (j + 1) % n) for i, j in perm])


def return_token_ring_partials_to_the_wrong_owner(monkeypatch):
    monkeypatch.setattr(token_ring, "lax", _LaxReturningToTheWrongOwner())


class _JnpTilingHeads:
    """`jax.numpy` as ulysses.py sees it, except that `repeat` tiles: K/V heads [a, b] become
    [a, b, a, b] instead of [a, a, b, b], so half the devices pair query heads with the wrong K/V."""

    def __getattr__(self, name):
        return getattr(jnp, name)

    def repeat(self, x, repeats, axis):
        return jnp.concatenate([x] * repeats, axis=axis)


def tile_ulysses_kv_heads(monkeypatch):
    monkeypatch.setattr(ulysses, "jnp", _JnpTilingHeads())


def lose_attention_scale(monkeypatch):
    """Logits q.k without the 1/sqrt(head_dim) factor."""
    correct = block._masked_logits
    monkeypatch.setattr(
        block, "_masked_logits", lambda q, k, q_pos, k_pos, scale, *seg: correct(q, k, q_pos, k_pos, 1.0, *seg)
    )


def round_logits_to_bf16(monkeypatch):
    """Softmax statistics taken from logits in the input dtype (bf16) instead of fp32."""
    correct = block._masked_logits
    monkeypatch.setattr(block, "_masked_logits", lambda *args: correct(*args).astype(jnp.bfloat16).astype(jnp.float32))


def stale_kv_prefetch(monkeypatch):
    """The double-buffered K/V fetch one chunk behind: chunk 0 is used twice, the last never."""
    correct = chunked._KVChunks.fetch
    monkeypatch.setattr(chunked._KVChunks, "fetch", lambda kv, j: correct(kv, j - 1))


def shift_rope_of_last_shard(monkeypatch, context: int):
    """RoPE positions of the last context shard off by one token."""
    correct = model.rope

    def rope(x, positions, theta, scaling=None):
        last_shard = positions.shape[0] - positions.shape[0] // context
        return correct(x, positions.at[last_shard:].add(1), theta, scaling)

    monkeypatch.setattr(model, "rope", rope)


def constant_logits(monkeypatch):
    """A model whose logits ignore it (a zero output head): every token scores ln(vocab)."""
    correct = model.chunked_cross_entropy
    monkeypatch.setattr(
        model, "chunked_cross_entropy", lambda x, head, targets, **kw: correct(x, head * 0, targets, **kw)
    )


def rope_frequencies_one_index_off(monkeypatch):
    """Pair i rotated at pair i+1's frequency, theta ** (-2(i+1) / head_dim)."""
    correct = model.rope_frequencies
    monkeypatch.setattr(
        model,
        "rope_frequencies",
        lambda head_dim, theta, scaling=None: correct(head_dim, theta, scaling) * theta ** (-2 / head_dim),
    )


def dequantize_through_fp32(monkeypatch):
    """FP8 operands dequantized in fp32 and then cast to the dot's dtype: the same numbers, but the
    cast hides the pattern XLA's GEMM rewriter turns into FP8 GEMMs (the form before issue 28)."""
    monkeypatch.setattr(
        fp8, "dequantize", lambda q, scale, out_dtype: (q.astype(jnp.float32) * scale).astype(out_dtype)
    )


def quantize_without_a_barrier(monkeypatch):
    """FP8 casts straight into the dequantization: the same numbers on a CPU, but XLA's GPU
    pipeline folds the two converts and no FP8 reaches the GEMM rewriter (issue 28's H200 run)."""

    def quantize(x, dtype, scale):
        limit = fp8.fp8_max(dtype)
        return jnp.clip(x.astype(jnp.float32) / scale, -limit, limit).astype(dtype)

    monkeypatch.setattr(fp8, "quantize", quantize)


def every_ring_step_from_an_earlier_member(monkeypatch):
    """The dual-chunk-swap ring takes every received K/V shard as one from an earlier member: all
    queries attend the first half of a later member's shard (their future) and none its second."""
    monkeypatch.setattr(ring._DualChunkRing, "from_earlier", lambda self, step: True)
