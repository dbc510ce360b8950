"""The ring's block kernel (trainer/ops/block_kernel.py): its pure-JAX implementation on one
device against the fp32 reference (forward output and fp32 log-sum-exp, causal and not, GQA; a
backward fed the *global* output and log-sum-exp of a key range split in two, as ring steps see
it), and where the cuDNN implementation is chosen."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer.ops import reference_attention
from longctx_trainer.ops.block import merge_partials
from longctx_trainer.ops.block_kernel import block_kernel, jax_kernel
from support import mutants

SEQ, HEADS, HEAD_DIM = 64, 4, 16
FP32 = dict(rtol=3e-5, atol=8e-6)  # as test_attention_block.py: fp32, only the summation order differs
KERNEL = jax_kernel(scale=HEAD_DIM**-0.5, chunk_tokens=16)  # 16-token chunks: the causal call skips pairs


def _inputs(kv_heads):
    keys = jax.random.split(jax.random.key(2), 4)
    q = jax.random.normal(keys[0], (2, SEQ, HEADS, HEAD_DIM))
    k, v = (jax.random.normal(key, (2, SEQ, kv_heads, HEAD_DIM)) for key in keys[1:3])
    return q, k, v, jax.random.normal(keys[3], q.shape)


def _reference_lse(q, k, causal):
    group = q.shape[2] // k.shape[2]
    logits = jnp.einsum("bthd,bshd->bhts", q, jnp.repeat(k, group, axis=2)) * HEAD_DIM**-0.5
    if causal:
        logits = jnp.where(jnp.tril(jnp.ones(logits.shape[-2:], bool)), logits, -jnp.inf)
    return jnp.transpose(jax.nn.logsumexp(logits, axis=-1), (0, 2, 1))


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("kv_heads", [4, 1])
def test_forward_and_backward_match_the_reference(causal, kv_heads):
    q, k, v, do = _inputs(kv_heads)
    out_ref, vjp = jax.vjp(lambda *x: reference_attention(*x, causal=causal), q, k, v)
    out, lse = KERNEL.forward(q, k, v, causal)
    np.testing.assert_allclose(out, out_ref, **FP32)
    np.testing.assert_allclose(lse, _reference_lse(q, k, causal), **FP32)
    grads = KERNEL.backward(q, k, v, out.astype(q.dtype), lse, do, causal)
    for name, actual, expected in zip(("dq", "dk", "dv"), grads, vjp(do), strict=True):
        np.testing.assert_allclose(actual, expected, err_msg=name, **FP32)


@pytest.mark.parametrize("kv_heads", [4, 1])
def test_two_key_halves_merge_forward_and_take_the_global_result_backward(kv_heads):
    """Keys in two calls, as ring steps deliver them: the partial results merge by their
    log-sum-exps, and each call's backward, given the merged output and log-sum-exp, gives that
    half's dK/dV and a share of dQ."""
    q, k, v, do = _inputs(kv_heads)
    out_ref, vjp = jax.vjp(lambda *x: reference_attention(*x, causal=False), q, k, v)
    halves = [(k[:, :16], v[:, :16]), (k[:, 16:], v[:, 16:])]  # unequal on purpose
    out, lse = merge_partials(*KERNEL.forward(q, *halves[0], False), *KERNEL.forward(q, *halves[1], False))
    np.testing.assert_allclose(out, out_ref, **FP32)
    (dq_a, dk_a, dv_a), (dq_b, dk_b, dv_b) = (KERNEL.backward(q, *kv, out, lse, do, False) for kv in halves)
    grads = (dq_a + dq_b, jnp.concatenate([dk_a, dk_b], axis=1), jnp.concatenate([dv_a, dv_b], axis=1))
    for name, actual, expected in zip(("dq", "dk", "dv"), grads, vjp(do), strict=True):
        np.testing.assert_allclose(actual, expected, err_msg=name, **FP32)


def test_the_check_fails_when_the_first_block_loses_its_causal_mask(monkeypatch):
    mutants.drop_causal_mask_on_first_block(monkeypatch)
    with pytest.raises(AssertionError):
        test_forward_and_backward_match_the_reference(True, 1)


@pytest.mark.parametrize(
    "dtype,head_dim,fused",
    [(jnp.bfloat16, 128, True), (jnp.float16, 64, True), (jnp.float32, 64, False), (jnp.bfloat16, 96 + 4, False)],
)
def test_cudnn_only_where_it_takes_the_inputs(dtype, head_dim, fused):
    """bf16/fp16 with a head size that is a multiple of 8 up to 128 get the per-platform choice;
    anything else is the JAX kernel itself on every platform."""
    kernel = block_kernel(dtype, head_dim, scale=1.0)
    assert (kernel.forward.__module__, kernel.forward.__qualname__.split(".")[0]) == (
        "longctx_trainer.ops.block_kernel",
        "block_kernel" if fused else "jax_kernel",
    )


# bf16 inputs against the fp32 reference on the same rounded inputs, q scaled by 3 (a trained
# model's log-sum-exp): test_attention_context_parallel.py's bf16 tolerances, not yet measured for
# cuDNN on a GPU; the log-sum-exp is fp32 from bf16 products.
BF16 = {
    "out": dict(rtol=2**-8, atol=1e-2),
    "lse": dict(rtol=2**-8, atol=2e-2),
    "dq": dict(rtol=2**-8, atol=2e-2),
    "dk": dict(rtol=2**-8, atol=8e-2),
    "dv": dict(rtol=2**-8, atol=5e-2),
}


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("causal", [True, False])
def test_bf16_kernel_matches_the_reference_cudnn_on_a_gpu(head_dim, causal):
    """The kernel bf16 ring steps use (GQA 8/2; cuDNN on a GPU, where hack/gpu-check runs this,
    the JAX kernel on a CPU): forward output and fp32 log-sum-exp, and, non-causally, two key
    halves merged and fed the merged result backward."""
    keys = jax.random.split(jax.random.key(3), 4)
    q = (3 * jax.random.normal(keys[0], (1, 256, 8, head_dim))).astype(jnp.bfloat16)
    k, v = (jax.random.normal(key, (1, 256, 2, head_dim)).astype(jnp.bfloat16) for key in keys[1:3])
    do = jax.random.normal(keys[3], q.shape).astype(jnp.bfloat16)
    q32, k32, v32 = (x.astype(jnp.float32) for x in (q, k, v))
    out_ref, vjp = jax.vjp(lambda *x: reference_attention(*x, causal=causal), q32, k32, v32)
    lse_ref = jax_kernel(scale=head_dim**-0.5).forward(q32, k32, v32, causal)[1]
    fused = block_kernel(jnp.bfloat16, head_dim, scale=head_dim**-0.5)
    if causal:
        out, lse = jax.jit(fused.forward, static_argnums=3)(q, k, v, True)
        grads = jax.jit(fused.backward, static_argnums=6)(q, k, v, out.astype(q.dtype), lse, do, True)
    else:
        halves = [(k[:, :128], v[:, :128]), (k[:, 128:], v[:, 128:])]
        forward = jax.jit(fused.forward, static_argnums=3)
        out, lse = merge_partials(*forward(q, *halves[0], False), *forward(q, *halves[1], False))
        backward = jax.jit(fused.backward, static_argnums=6)
        a, b = (backward(q, *kv, out.astype(q.dtype), lse, do, False) for kv in halves)
        grads = (a[0] + b[0], jnp.concatenate([a[1], b[1]], axis=1), jnp.concatenate([a[2], b[2]], axis=1))
    expected = (out_ref, lse_ref, *vjp(do.astype(jnp.float32)))
    for name, actual, want in zip(("out", "lse", "dq", "dk", "dv"), (out, lse, *grads), expected, strict=True):
        np.testing.assert_allclose(np.asarray(actual, np.float32), np.asarray(want), err_msg=name, **BF16[name])
