"""Shared inputs and checks of the attention numerics tests (tests/unit/trainer/test_attention_*.py,
test_doc_balance.py)."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType

from longctx_trainer.ops import reference_attention

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


def case_id(case) -> str:
    """The test id of a context-parallel case (impl, (data, context, tensor), causal, kv_heads, options)."""
    impl, layout, causal, kv_heads, options = case
    extra = "-".join(f"{k}={v}" for k, v in options.items())
    return f"{impl}-{'x'.join(map(str, layout))}-{'causal' if causal else 'full'}-kv{kv_heads}-{extra}"


def document_ids(lengths) -> np.ndarray:
    """The document id of each token, documents of `lengths` back to back."""
    return np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)


def packed_segments(seed: int) -> np.ndarray:
    """[BATCH, SEQ]: row 0 has one-token documents and one document of 110 tokens, which covers
    part of every shard in every layout used here (shards of 16 tokens and down); row 1 has random
    lengths drawn from `seed` (1 to 24 tokens, several of one token)."""
    rng = np.random.default_rng(seed)
    lengths, left = [], SEQ
    while left:
        length = min(left, int(rng.choice([1, 1, rng.integers(2, 25)])))
        lengths.append(length)
        left -= length
    assert lengths.count(1) > 1 and len(lengths) > 8
    return np.stack([document_ids([1, 1, 3, 110, 1, 12]), document_ids(lengths)])[:BATCH]


@functools.cache
def masked_reference(kv_heads, causal, seed):
    """The fp32 reference's output and (dq, dk, dv), masked to the documents of packed_segments(seed)."""
    (q, k, v), do = inputs(kv_heads)
    segments = jnp.asarray(packed_segments(seed))
    out, vjp = jax.vjp(functools.partial(reference_attention, causal=causal, segments=segments), q, k, v)
    return out, vjp(do)
