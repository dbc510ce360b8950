"""The block kernel against the fp32 reference on one device.

Tolerances: fp32 results within 2e-5 of the reference, relative to the reference's largest
magnitude (only the summation order differs); bf16 inputs within 4e-2.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer.ops import reference_attention
from longctx_trainer.ops.block import block_backward, block_forward, merge_partials

SEQ, HEADS, HEAD_DIM = 64, 8, 16
SCALE = HEAD_DIM ** -0.5
POSITIONS = jnp.arange(SEQ)


def _inputs(kv_heads, dtype=jnp.float32):
    keys = jax.random.split(jax.random.key(1), 4)
    q = jax.random.normal(keys[0], (2, SEQ, HEADS, HEAD_DIM))
    k, v = (jax.random.normal(key, (2, SEQ, kv_heads, HEAD_DIM)) for key in keys[1:3])
    do = jax.random.normal(keys[3], q.shape)
    return tuple(x.astype(dtype) for x in (q, k, v)) + (do,)


def _close(actual, expected, rel):
    expected = np.asarray(expected, np.float32)
    np.testing.assert_allclose(np.asarray(actual, np.float32), expected, rtol=rel,
                               atol=rel * np.abs(expected).max())


def test_reference_matches_jax_dot_product_attention():
    q, k, v, _ = _inputs(kv_heads=2)
    for causal in (False, True):
        _close(reference_attention(q, k, v, causal=causal),
               jax.nn.dot_product_attention(q, k, v, is_causal=causal), 2e-5)


@pytest.mark.parametrize("kv_heads", [8, 2, 1])
@pytest.mark.parametrize("causal", [False, True])
def test_forward_matches_reference(kv_heads, causal):
    q, k, v, _ = _inputs(kv_heads)
    positions = (POSITIONS, POSITIONS) if causal else ()
    out, lse = block_forward(q, k, v, *positions, scale=SCALE)
    _close(out, reference_attention(q, k, v, causal=causal), 2e-5)
    assert lse.shape == q.shape[:3] and lse.dtype == jnp.float32


def test_merging_two_key_halves_equals_one_block_even_with_rows_that_see_nothing():
    q, k, v, _ = _inputs(kv_heads=2)
    half = SEQ // 2
    parts = [block_forward(q, k[:, s], v[:, s], POSITIONS, POSITIONS[s], scale=SCALE)
             for s in (slice(half, None), slice(None, half))]
    assert np.isneginf(np.asarray(parts[0][1][:, :half])).all()  # early queries see no late key
    out, lse = merge_partials(*parts[0], *parts[1])
    whole_out, whole_lse = block_forward(q, k, v, POSITIONS, POSITIONS, scale=SCALE)
    _close(out, whole_out, 2e-5)
    _close(lse, whole_lse, 2e-5)


@pytest.mark.parametrize("kv_heads", [8, 1])
def test_backward_matches_autodiff_of_reference(kv_heads):
    q, k, v, do = _inputs(kv_heads)
    out, lse = block_forward(q, k, v, POSITIONS, POSITIONS, scale=SCALE)
    delta = jnp.sum(do * out, axis=-1)
    grads = block_backward(q, k, v, do, lse, delta, POSITIONS, POSITIONS, scale=SCALE)
    _, vjp = jax.vjp(lambda q, k, v: reference_attention(q, k, v, causal=True), q, k, v)
    for actual, expected in zip(grads, vjp(do)):
        _close(actual, expected, 2e-5)


def test_bf16_inputs_keep_fp32_statistics():
    q, k, v, _ = _inputs(kv_heads=2, dtype=jnp.bfloat16)
    out, lse = block_forward(q, k, v, POSITIONS, POSITIONS, scale=SCALE)
    assert out.dtype == lse.dtype == jnp.float32
    _close(out, reference_attention(q, k, v, causal=True), 4e-2)
