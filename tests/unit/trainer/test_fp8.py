"""FP8 matmuls (trainer/fp8.py) against NumPy: the same scales, the same rounding (ml_dtypes'
float8 casts), saturation instead of inf/nan, the delayed-scaling rule, and gradients through the
quantisation as a straight-through reference computes them; and the lowered program in the form
XLA's GPU GEMM rewriter turns into FP8 GEMMs."""

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from longctx_trainer import fp8
from support import mutants
from support.hlo import fp8_dots

RNG = np.random.default_rng(0)
E4, E5 = "f8e4m3fn", "f8e5m2"  # HLO's names of the FP8 types
NP_TYPES = {fp8.E4M3: ml_dtypes.float8_e4m3fn, fp8.E5M2: ml_dtypes.float8_e5m2}


def np_qdq(x: np.ndarray, dtype, scale: float) -> np.ndarray:
    limit = float(ml_dtypes.finfo(NP_TYPES[dtype]).max)
    q = np.clip(x.astype(np.float32) / np.float32(scale), -limit, limit).astype(NP_TYPES[dtype])
    return q.astype(np.float32) * np.float32(scale)


@pytest.mark.parametrize("dtype", [fp8.E4M3, fp8.E5M2])
@pytest.mark.parametrize("scale", [1.0, 0.037, 12.5])
def test_quantize_dequantize_equals_numpy_exactly(dtype, scale):
    x = (RNG.standard_normal((64, 48)) * 30).astype(np.float32)
    ours = np.asarray(fp8.quantize_dequantize(jnp.asarray(x), dtype, jnp.float32(scale), jnp.float32))
    np.testing.assert_array_equal(ours, np_qdq(x, dtype, scale))


@pytest.mark.parametrize("dtype", [fp8.E4M3, fp8.E5M2])
def test_values_beyond_the_range_saturate_never_inf_or_nan(dtype):
    x = jnp.asarray([1e30, -1e30, 3e5, -3e5, 1.0], jnp.float32)
    out = np.asarray(fp8.quantize_dequantize(x, dtype, jnp.float32(1.0), jnp.float32))
    limit = fp8.fp8_max(dtype)
    assert np.isfinite(out).all()
    np.testing.assert_array_equal(out[:4], [limit, -limit, limit, -limit])


def test_scale_follows_the_largest_amax_of_the_history():
    state = fp8.new_state(history=3)
    assert float(state["scale"]) == 1.0
    amaxes = [4.0, 896.0, 2.0, 1.0, 0.5]
    for step, amax in enumerate(amaxes):
        state = fp8.observed(state, fp8.amax(jnp.asarray([amax, -amax / 2])), fp8.E4M3)
        window = amaxes[max(0, step - 2) : step + 1]  # the last three uses
        assert float(state["scale"]) == pytest.approx(max(window) / 448.0, rel=1e-7)
        np.testing.assert_allclose(np.asarray(state["amax_history"])[: len(window)], window[::-1])
    assert float(fp8.next_scale(jnp.zeros(3), fp8.E4M3)) == 1.0  # never seen: scale 1


def _state(x_scale, w_scale, g_scale):
    state = fp8.einsum_state(history=4)
    for name, scale in (("x", x_scale), ("w", w_scale), ("grad", g_scale)):
        state[name]["scale"] = jnp.float32(scale)
    return state


def test_forward_is_the_dot_of_the_quantized_operands():
    x = (RNG.standard_normal((2, 8, 32)) * 5).astype(np.float32)
    w = (RNG.standard_normal((32, 16)) * 0.2).astype(np.float32)
    state = _state(0.02, 0.001, 0.0005)
    out = np.asarray(fp8.fp8_einsum("bsh,hf->bsf", jnp.asarray(x), jnp.asarray(w), state))
    expected = np.einsum("bsh,hf->bsf", np_qdq(x, fp8.E4M3, 0.02), np_qdq(w, fp8.E4M3, 0.001))
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)  # fp32 summation order only


def test_gradients_are_straight_through_with_e5m2_output_gradients_and_states_are_updated():
    x = (RNG.standard_normal((2, 8, 32)) * 5).astype(np.float32)
    w = (RNG.standard_normal((32, 16)) * 0.2).astype(np.float32)
    g = (RNG.standard_normal((2, 8, 16)) * 3).astype(np.float32)
    state = _state(0.02, 0.001, 0.01)

    def loss(x, w, state):
        return jnp.sum(fp8.fp8_einsum("bsh,hf->bsf", x, w, state) * jnp.asarray(g))

    dx, dw, new = jax.grad(loss, argnums=(0, 1, 2))(jnp.asarray(x), jnp.asarray(w), state)
    gq = np_qdq(g, fp8.E5M2, 0.01)
    np.testing.assert_allclose(
        np.asarray(dx), np.einsum("bsf,hf->bsh", gq, np_qdq(w, fp8.E4M3, 0.001)), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
        np.asarray(dw), np.einsum("bsh,bsf->hf", np_qdq(x, fp8.E4M3, 0.02), gq), rtol=1e-6, atol=1e-5
    )
    # The state's "gradient" is its next value: each operand's amax entered its history.
    assert float(new["x"]["amax_history"][0]) == pytest.approx(np.abs(x).max())
    assert float(new["w"]["amax_history"][0]) == pytest.approx(np.abs(w).max())
    assert float(new["grad"]["amax_history"][0]) == pytest.approx(np.abs(g).max())
    assert float(new["grad"]["scale"]) == pytest.approx(np.abs(g).max() / 57344.0)


def test_the_reference_would_catch_a_missing_saturation():
    """The exact comparison above can fail: without the clip, e4m3 overflows to nan."""
    x = np.asarray([1e6], np.float32)
    unclipped = np.asarray(x / 1.0).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)
    assert not np.isfinite(unclipped).all()
    assert np.isfinite(np_qdq(x, fp8.E4M3, 1.0)).all()


def _lowered_forward_and_backward(dtype) -> str:
    x = jnp.ones((2, 8, 32), dtype)
    w = jnp.ones((32, 4, 8), jnp.float32)  # the fp32 master weight

    def loss(x, w, state):
        return jnp.sum(fp8.fp8_einsum("bsh,hnd->bsnd", x, w, state).astype(jnp.float32))

    lowered = jax.jit(jax.value_and_grad(loss, argnums=(0, 1))).lower(x, w, fp8.einsum_state(history=4))
    return lowered.as_text(dialect="hlo")


@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float32])
def test_every_dot_has_the_fp8_gemm_pattern_forward_and_backward(dtype):
    """Forward e4m3 x e4m3; backward dX = e5m2 dY x e4m3 W and dW = e4m3 X x e5m2 dY, each operand
    dequantized straight into the dot's dtype (support.hlo.fp8_dots mirrors the rewriter's walk)."""
    dots = fp8_dots(_lowered_forward_and_backward(dtype))
    assert sorted(dots) == sorted([(E4, E4), (E5, E4), (E4, E5)])


def test_an_fp32_detour_before_the_dot_fails_the_pattern_check(monkeypatch):
    mutants.dequantize_through_fp32(monkeypatch)
    assert fp8_dots(_lowered_forward_and_backward(jnp.bfloat16)) == []


def test_an_fp8_cast_the_gpu_compiler_can_fold_fails_the_pattern_check(monkeypatch):
    mutants.quantize_without_a_barrier(monkeypatch)
    assert fp8_dots(_lowered_forward_and_backward(jnp.bfloat16)) == []


def test_the_backward_keeps_fp8_operands_and_no_full_precision_copy():
    """What fp8_einsum saves for the backward: x and w in e4m3 plus scalars, never x or w in bf16
    (their amaxes are taken in the forward)."""
    from jax._src.ad_checkpoint import saved_residuals  # JAX's own listing of a function's residuals

    x, w = jnp.ones((4, 8), jnp.bfloat16), jnp.ones((8, 16), jnp.bfloat16)
    state = fp8.einsum_state(history=4)
    saved = [aval for aval, _ in saved_residuals(lambda x, w: fp8.fp8_einsum("td,df->tf", x, w, state).sum(), x, w)]
    large = sorted((str(a.dtype), a.shape) for a in saved if a.size > 4)
    assert large == [("float8_e4m3fn", (4, 8)), ("float8_e4m3fn", (8, 16))]
