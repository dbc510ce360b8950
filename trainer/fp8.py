"""FP8 matmuls with delayed scaling: e4m3 inputs and weights forward, e5m2 gradients backward.

A tensor is quantized as clip(x / scale, +-max) cast to the FP8 type, then dequantized right
before the dot: converted from FP8 *straight to the dot's operand dtype* and multiplied there by
the broadcast scale. That is the pattern XLA's GPU GEMM rewriter turns into a cuBLASLt FP8 GEMM
with the scales folded in: from each dot operand it walks back through layout-only ops
(reshape, transpose, broadcast, ...) to `multiply(convert(f8), broadcast(scale))`; any other op
on the way, such as the bf16 cast of an fp32 dequantization, leaves an ordinary bf16 GEMM. The
FP8 value leaves `quantize` through an optimization barrier: XLA's GPU pipeline otherwise folds
`convert(convert(x, f8), bf16)` into `convert(x, bf16)` (its excess-precision simplification,
on by default), which drops the FP8 rounding and every FP8 type before the rewriter runs (seen on
an H200 with JAX 0.11.2, 2026-11-27: no FP8 GEMM, no FP8 type in the compiled step). The
backward's dots are written out the same way (not left to autodiff, whose fp32 cotangent would
insert a convert). On a CPU the same program runs emulated. Each operand
has its own per-tensor state: the amax (largest magnitude) of its last `history` uses and the
scale derived from them ("delayed scaling", as Transformer Engine and Flax's FP8 ops do): the
scale of step s comes from amaxes of steps before s, so no extra pass over the tensor is needed.

The state is not trained: `fp8_einsum`'s custom VJP returns each operand's *updated* state as the
"gradient" of its state, and the training step stores those as they are, apart from the weights
the optimizer updates (params["fp8"], see longctx_trainer.model and .train). Master weights stay
in full precision; only the matmul sees FP8.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from jax import lax

E4M3 = jnp.float8_e4m3fn
E5M2 = jnp.float8_e5m2
F32 = jnp.float32
AMAX_HISTORY = 16
"""Uses of a tensor whose amax sets its next scale."""


def fp8_max(dtype) -> float:
    return float(jnp.finfo(dtype).max)


def new_state(history: int = AMAX_HISTORY) -> dict:
    """A tensor's scaling state: scale 1 and an empty amax history."""
    return {"scale": jnp.ones((), F32), "amax_history": jnp.zeros((history,), F32)}


def quantize(x: jax.Array, dtype, scale: jax.Array) -> jax.Array:
    """x / scale in `dtype` (values beyond the range saturate at +-max: never inf/nan), behind an
    optimization barrier so that no compiler pass folds the FP8 cast away (module docstring)."""
    limit = fp8_max(dtype)
    return lax.optimization_barrier(jnp.clip(x.astype(F32) / scale, -limit, limit).astype(dtype))


def dequantize(q: jax.Array, scale: jax.Array, out_dtype) -> jax.Array:
    """q times scale, computed in `out_dtype`: one convert from FP8, one multiply (the form the
    GEMM rewriter matches; a detour through fp32 would hide it)."""
    return q.astype(out_dtype) * scale.astype(out_dtype)


def quantize_dequantize(x: jax.Array, dtype, scale: jax.Array, out_dtype) -> jax.Array:
    """x rounded to `dtype` at `scale`, returned in `out_dtype`."""
    return dequantize(quantize(x, dtype, scale), scale, out_dtype)


def next_scale(amax_history: jax.Array, dtype) -> jax.Array:
    """The delayed-scaling rule: the largest amax of the history maps to the type's max; a tensor
    never seen non-zero keeps scale 1."""
    amax = jnp.max(amax_history)
    return jnp.where(amax > 0, amax / fp8_max(dtype), 1.0).astype(F32)


def amax(x: jax.Array) -> jax.Array:
    return jnp.max(jnp.abs(x)).astype(F32)


def observed(state: dict, x_amax: jax.Array, dtype) -> dict:
    """The state after using a tensor whose amax is x_amax: pushed into the history, the scale for
    the next use."""
    history = jnp.roll(state["amax_history"], 1).at[0].set(x_amax)
    return {"scale": next_scale(history, dtype), "amax_history": history}


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def fp8_einsum(spec: str, x: jax.Array, w: jax.Array, state: dict) -> jax.Array:
    """einsum(spec, x, w) with x and w in e4m3 (forward) and the output gradient in e5m2
    (backward), each at its state's current scale. state = {"x", "w", "grad"} scaling states."""
    return _forward(spec, x, w, state)[0]


def _dot(spec, a, b, out_dtype):
    return jnp.einsum(spec, a, b, preferred_element_type=F32).astype(out_dtype)


def _gradient_specs(spec: str) -> tuple[str, str]:
    """The einsums of a two-operand contraction's gradients: "x,w->o" gives ("o,w->x", "x,o->w")."""
    operands, out = spec.replace(" ", "").split("->")
    x, w = operands.split(",")
    return f"{out},{w}->{x}", f"{x},{out}->{w}"


def _forward(spec, x, w, state):
    """The output and the FP8 operands (saved for the backward: half the bytes of bf16)."""
    xq, wq = quantize(x, E4M3, state["x"]["scale"]), quantize(w, E4M3, state["w"]["scale"])
    deq = partial(dequantize, out_dtype=x.dtype)
    return _dot(spec, deq(xq, state["x"]["scale"]), deq(wq, state["w"]["scale"]), x.dtype), (xq, wq)


def _fwd(spec, x, w, state):
    """Saves the FP8 operands, the amaxes of x and w (scalars) and two empty arrays that carry the
    gradients' dtypes: no full-precision copy of x or w outlives the forward."""
    out, (xq, wq) = _forward(spec, x, w, state)
    return out, (xq, wq, amax(x), amax(w), jnp.empty((0,), x.dtype), jnp.empty((0,), w.dtype), state)


def _bwd(spec, residuals, g):
    xq, wq, x_amax, w_amax, x, w, state = residuals
    deq = partial(dequantize, out_dtype=g.dtype)
    gd = deq(quantize(g, E5M2, state["grad"]["scale"]), state["grad"]["scale"])
    dx_spec, dw_spec = _gradient_specs(spec)
    dx = _dot(dx_spec, gd, deq(wq, state["w"]["scale"]), x.dtype)
    dw = _dot(dw_spec, deq(xq, state["x"]["scale"]), gd, w.dtype)
    updated = {
        "x": observed(state["x"], x_amax, E4M3),
        "w": observed(state["w"], w_amax, E4M3),
        "grad": observed(state["grad"], amax(g), E5M2),
    }
    return dx, dw, updated


fp8_einsum.defvjp(_fwd, _bwd)


def einsum_state(history: int = AMAX_HISTORY) -> dict:
    """Scaling state of one fp8_einsum: its input, its weight and its output gradient."""
    return {"x": new_state(history), "w": new_state(history), "grad": new_state(history)}


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def shared_across(state: dict, uses: int) -> dict:
    """One fp8_einsum state handed to `uses` uses of the same matmul (stacked, for a scan over
    chunks). Backward merges their updated states into one, as if the matmul had run once on all
    the chunks: the step's amax is the largest of the chunks' (autodiff would sum them)."""
    return jax.tree.map(lambda x: jnp.broadcast_to(x, (uses, *x.shape)), state)


def _shared_fwd(state, uses):
    return shared_across(state, uses), None


def _shared_bwd(uses, _, updated):
    def merged(per_use: dict, dtype) -> dict:
        history = per_use["amax_history"][0].at[0].set(jnp.max(per_use["amax_history"][:, 0]))
        return {"scale": next_scale(history, dtype), "amax_history": history}

    return ({"x": merged(updated["x"], E4M3), "w": merged(updated["w"], E4M3), "grad": merged(updated["grad"], E5M2)},)


shared_across.defvjp(_shared_fwd, _shared_bwd)
