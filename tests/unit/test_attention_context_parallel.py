"""Ring and all-gather context-parallel attention on 8 CPU devices against the fp32 reference.

Each case runs one jitted function (output and input gradients through the custom VJPs) on
inputs laid out in the load-balancing order, undoes the order, and compares with the
single-device reference on natural-order inputs. Tolerances: fp32 within 2e-5 relative to the
reference's largest magnitude; bf16 inputs within 4e-2.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType

from longctx_trainer.ops import (context_parallel_attention, inverse_permutation, permutation,
                                 reference_attention)

BATCH, SEQ, HEADS, HEAD_DIM = 2, 128, 8, 16


def make_mesh(data, context, tensor):
    devices = jax.devices()[:data * context * tensor]
    return jax.make_mesh((data, context, tensor), ("data", "context", "tensor"),
                         axis_types=(AxisType.Auto,) * 3, devices=devices)


def inputs(kv_heads, dtype=jnp.float32):
    keys = jax.random.split(jax.random.key(0), 4)
    q = jax.random.normal(keys[0], (BATCH, SEQ, HEADS, HEAD_DIM))
    k, v = (jax.random.normal(key, (BATCH, SEQ, kv_heads, HEAD_DIM)) for key in keys[1:3])
    do = jax.random.normal(keys[3], q.shape)
    return tuple(x.astype(dtype) for x in (q, k, v)), do


@functools.cache
def reference_with_grads(kv_heads, causal):
    (q, k, v), do = inputs(kv_heads)
    out, vjp = jax.vjp(functools.partial(reference_attention, causal=causal), q, k, v)
    return out, vjp(do)


def context_parallel_with_grads(mesh, *, kv_heads, causal, dtype=jnp.float32, **options):
    """Output and (dq, dk, dv) in natural token order, computed in the layout order."""
    context, scheme = mesh.shape["context"], options.get("load_balance", "dual_chunk_swap")
    perm, inverse = permutation(SEQ, context, scheme), inverse_permutation(SEQ, context, scheme)

    @jax.jit
    def run(q, k, v, do):
        attend = functools.partial(context_parallel_attention, mesh=mesh, causal=causal, **options)
        out, vjp = jax.vjp(attend, q[:, perm], k[:, perm], v[:, perm])
        grads = vjp(do[:, perm].astype(dtype))
        return out[:, inverse], tuple(g[:, inverse] for g in grads)

    (q, k, v), do = inputs(kv_heads, dtype)
    return run(q, k, v, do)


def assert_close(actual, expected, rel):
    expected = np.asarray(expected, np.float32)
    np.testing.assert_allclose(np.asarray(actual, np.float32), expected, rtol=rel,
                               atol=rel * np.abs(expected).max())


def assert_matches_reference(result, kv_heads, causal, rel=2e-5):
    out, grads = result
    ref_out, ref_grads = reference_with_grads(kv_heads, causal)
    assert_close(out, ref_out, rel)
    for name, actual, expected in zip("qkv", grads, ref_grads):
        assert actual.shape == expected.shape, name
        assert_close(actual, expected, rel)


# (impl, (data, context, tensor), causal, kv_heads, load_balance): every context size, causal and
# not, heads 8/8, 8/2 and 8/1, each layout, and a tensor axis > 1, for both implementations.
CASES = [
    ("ring", (2, 1, 4), True, 8, "none"),
    ("ring", (2, 1, 1), False, 1, "none"),
    ("ring", (2, 2, 2), True, 2, "dual_chunk_swap"),
    ("ring", (2, 2, 1), False, 8, "none"),
    ("ring", (2, 4, 1), True, 1, "dual_chunk_swap"),
    ("ring", (1, 4, 2), True, 8, "striped"),
    ("ring", (2, 4, 1), False, 2, "dual_chunk_swap"),
    ("ring", (1, 8, 1), True, 2, "dual_chunk_swap"),
    ("ring", (1, 8, 1), True, 1, "striped"),
    ("ring", (1, 8, 1), True, 8, "none"),
    ("ring", (1, 8, 1), False, 1, "none"),
    ("all_gather", (2, 1, 2), True, 2, "none"),
    ("all_gather", (2, 2, 2), True, 8, "dual_chunk_swap"),
    ("all_gather", (2, 4, 1), False, 1, "striped"),
    ("all_gather", (1, 8, 1), True, 2, "dual_chunk_swap"),
    ("all_gather", (1, 8, 1), True, 1, "none"),
]


@pytest.mark.parametrize("impl,layout,causal,kv_heads,load_balance", CASES,
                         ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x))
def test_matches_reference_forward_and_gradients(impl, layout, causal, kv_heads, load_balance):
    result = context_parallel_with_grads(make_mesh(*layout), kv_heads=kv_heads, causal=causal,
                                         impl=impl, load_balance=load_balance)
    assert_matches_reference(result, kv_heads, causal)


@pytest.mark.parametrize("impl", ["ring", "all_gather"])
def test_bf16_within_bf16_tolerance(impl):
    result = context_parallel_with_grads(make_mesh(1, 8, 1), kv_heads=2, causal=True,
                                         dtype=jnp.bfloat16, impl=impl)
    assert result[0].dtype == jnp.bfloat16
    assert_matches_reference(result, kv_heads=2, causal=True, rel=4e-2)


def test_unknown_impl_is_rejected():
    (q, k, v), _ = inputs(8)
    with pytest.raises(ValueError, match="impl"):
        context_parallel_attention(q, k, v, mesh=make_mesh(1, 8, 1), causal=True, impl="ulysses")
