"""Shared inputs and checks of the attention numerics tests (tests/unit/trainer/test_attention_*.py)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType

BATCH, SEQ, HEADS, HEAD_DIM = 2, 128, 8, 16

# fp32, measured 2026-11-24 over all CASES: at most 2.5e-6 absolute on entries below 0.1 and
# 1.15e-5 relative on the others (entries reach 9), about 3x below each term; the worst entry
# uses 23% of its tolerance. The mutants err by 1 to 10 (a dropped mask, a skipped rotation, a
# lost scale).
FP32 = dict(rtol=3e-5, atol=8e-6)


def make_mesh(data, context, tensor):
    devices = jax.devices()[: data * context * tensor]
    return jax.make_mesh(
        (data, context, tensor), ("data", "context", "tensor"), axis_types=(AxisType.Auto,) * 3, devices=devices
    )


def inputs(kv_heads, dtype=jnp.float32, q_scale=1.0):
    keys = jax.random.split(jax.random.key(0), 4)
    q = q_scale * jax.random.normal(keys[0], (BATCH, SEQ, HEADS, HEAD_DIM))
    k, v = (jax.random.normal(key, (BATCH, SEQ, kv_heads, HEAD_DIM)) for key in keys[1:3])
    do = jax.random.normal(keys[3], q.shape)
    return tuple(x.astype(dtype) for x in (q, k, v)), do


def assert_matches_reference(result, reference, tolerances):
    """`tolerances`: one dict(rtol, atol) for out, dq, dk and dv alike, or one per name."""
    for name, actual, expected in zip(
        ("out", "dq", "dk", "dv"), (result[0], *result[1]), (reference[0], *reference[1]), strict=False
    ):
        assert actual.shape == expected.shape, name
        np.testing.assert_allclose(
            np.asarray(actual, np.float32), np.asarray(expected), err_msg=name, **tolerances.get(name, tolerances)
        )
