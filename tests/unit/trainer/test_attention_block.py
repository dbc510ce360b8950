"""The block kernel against the fp32 reference on one device.

Compared element by element, |actual - expected| <= atol + rtol * |expected|, with tolerances
set from measured errors; each check also runs against a mutant (tests/support/mutants.py) and
must fail on it.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer.ops import reference_attention
from longctx_trainer.ops.block import block_backward, block_forward, merge_partials
from support import mutants

SEQ, HEADS, HEAD_DIM = 64, 8, 16
SCALE = HEAD_DIM**-0.5
POSITIONS = jnp.arange(SEQ)

# fp32 (only the summation order differs), measured 2026-11-24: forward, merge and backward at
# most 7.2e-6 absolute (on entries of 15) and 3.1e-6 relative where |expected| >= 10% of the
# largest entry; the reference equals jax.nn.dot_product_attention exactly. The same tolerance
# as the context-parallel tests, about 3x the errors.
FP32 = dict(rtol=3e-5, atol=8e-6)
# bf16 inputs, fp32 output, against the reference on the same rounded inputs, measured
# 2026-11-24: output 2.9e-3 absolute (from the bf16 probabilities in P.V; one bf16 step of
# rtol, atol 2x); log-sum-exp 4.8e-7 (its statistics are fp32, so the fp32 tolerance holds).
# Statistics taken from bf16-rounded logits err by 1.1e-2 (output) and 7.2e-3 (log-sum-exp).
BF16_OUT = dict(rtol=2**-8, atol=6e-3)


def _inputs(kv_heads, dtype=jnp.float32):
    keys = jax.random.split(jax.random.key(1), 4)
    q = jax.random.normal(keys[0], (2, SEQ, HEADS, HEAD_DIM))
    k, v = (jax.random.normal(key, (2, SEQ, kv_heads, HEAD_DIM)) for key in keys[1:3])
    do = jax.random.normal(keys[3], q.shape)
    return tuple(x.astype(dtype) for x in (q, k, v)) + (do,)


def _close(actual, expected, tolerance):
    np.testing.assert_allclose(np.asarray(actual, np.float32), np.asarray(expected, np.float32), **tolerance)


def _reference_lse(q, k, causal):
    """fp32 log-sum-exp [b, t, heads] of the scaled logits."""
    q, k = (x.astype(jnp.float32) for x in (q, k))
    k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)
    logits = jnp.einsum("bthd,bshd->bhts", q, k) * SCALE
    if causal:
        logits = jnp.where(jnp.tril(jnp.ones((SEQ, SEQ), bool)), logits, -jnp.inf)
    return jnp.transpose(jax.nn.logsumexp(logits, axis=-1), (0, 2, 1))


def test_reference_matches_jax_dot_product_attention():
    q, k, v, _ = _inputs(kv_heads=2)
    for causal in (False, True):
        _close(
            reference_attention(q, k, v, causal=causal), jax.nn.dot_product_attention(q, k, v, is_causal=causal), FP32
        )


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_reference(kv_heads, causal):
    q, k, v, _ = _inputs(kv_heads)
    positions = (POSITIONS, POSITIONS) if causal else ()
    out, lse = block_forward(q, k, v, *positions, scale=SCALE)
    _close(out, reference_attention(q, k, v, causal=causal), FP32)
    _close(lse, _reference_lse(q, k, causal), FP32)
    assert lse.dtype == jnp.float32


def test_forward_check_fails_without_the_scale(monkeypatch):
    mutants.lose_attention_scale(monkeypatch)
    with pytest.raises(AssertionError):
        test_forward_matches_reference(kv_heads=2, causal=True)


def test_merging_two_key_halves_equals_one_block_even_with_rows_that_see_nothing():
    q, k, v, _ = _inputs(kv_heads=2)
    half = SEQ // 2
    parts = [
        block_forward(q, k[:, s], v[:, s], POSITIONS, POSITIONS[s], scale=SCALE)
        for s in (slice(half, None), slice(None, half))
    ]
    assert np.isneginf(np.asarray(parts[0][1][:, :half])).all()  # early queries see no late key
    out, lse = merge_partials(*parts[0], *parts[1])
    whole_out, whole_lse = block_forward(q, k, v, POSITIONS, POSITIONS, scale=SCALE)
    _close(out, whole_out, FP32)
    _close(lse, whole_lse, FP32)


@pytest.mark.parametrize("kv_heads", [8, 1])
def test_backward_matches_autodiff_of_reference(kv_heads):
    q, k, v, do = _inputs(kv_heads)
    out, lse = block_forward(q, k, v, POSITIONS, POSITIONS, scale=SCALE)
    delta = jnp.sum(do * out, axis=-1)
    grads = block_backward(q, k, v, do, lse, delta, POSITIONS, POSITIONS, scale=SCALE)
    _, vjp = jax.vjp(lambda q, k, v: reference_attention(q, k, v, causal=True), q, k, v)
    for actual, expected in zip(grads, vjp(do), strict=False):
        _close(actual, expected, FP32)


def test_backward_check_fails_without_the_scale(monkeypatch):
    mutants.lose_attention_scale(monkeypatch)
    with pytest.raises(AssertionError):
        test_backward_matches_autodiff_of_reference(kv_heads=1)


def test_bf16_inputs_keep_fp32_statistics():
    q, k, v, _ = _inputs(kv_heads=2, dtype=jnp.bfloat16)
    out, lse = block_forward(q, k, v, POSITIONS, POSITIONS, scale=SCALE)
    assert out.dtype == lse.dtype == jnp.float32
    _close(out, reference_attention(q, k, v, causal=True), BF16_OUT)
    _close(lse, _reference_lse(q, k, causal=True), FP32)


def test_bf16_check_fails_on_statistics_from_bf16_logits(monkeypatch):
    mutants.round_logits_to_bf16(monkeypatch)
    with pytest.raises(AssertionError):
        test_bf16_inputs_keep_fp32_statistics()
