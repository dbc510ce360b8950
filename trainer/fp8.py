"""FP8 matmuls with delayed scaling: e4m3 inputs and weights forward, e5m2 gradients backward.

A tensor is quantized as clip(x / scale, +-max) cast to the FP8 type, then dequantized (times
scale) back to the compute dtype right before the dot: XLA recognises this pattern on GPUs and
emits an FP8 GEMM with the scales folded in; on a CPU the same program runs emulated. Each operand
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


def quantize_dequantize(x: jax.Array, dtype, scale: jax.Array, out_dtype) -> jax.Array:
    """x rounded to `dtype` at `scale` (values beyond the range saturate at +-max: never inf/nan),
    returned in `out_dtype`."""
    limit = fp8_max(dtype)
    q = jnp.clip(x.astype(F32) / scale, -limit, limit).astype(dtype)
    return (q.astype(F32) * scale).astype(out_dtype)


def next_scale(amax_history: jax.Array, dtype) -> jax.Array:
    """The delayed-scaling rule: the largest amax of the history maps to the type's max; a tensor
    never seen non-zero keeps scale 1."""
    amax = jnp.max(amax_history)
    return jnp.where(amax > 0, amax / fp8_max(dtype), 1.0).astype(F32)


def observed(state: dict, x: jax.Array, dtype) -> dict:
    """The state after using x: its amax pushed into the history, the scale for the next use."""
    history = jnp.roll(state["amax_history"], 1).at[0].set(jnp.max(jnp.abs(x)).astype(F32))
    return {"scale": next_scale(history, dtype), "amax_history": history}


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def fp8_einsum(spec: str, x: jax.Array, w: jax.Array, state: dict) -> jax.Array:
    """einsum(spec, x, w) with x and w in e4m3 (forward) and the output gradient in e5m2
    (backward), each at its state's current scale. state = {"x", "w", "grad"} scaling states."""
    return _forward(spec, x, w, state)[0]


def _forward(spec, x, w, state):
    xq = quantize_dequantize(x, E4M3, state["x"]["scale"], x.dtype)
    wq = quantize_dequantize(w, E4M3, state["w"]["scale"], x.dtype)
    return jnp.einsum(spec, xq, wq, preferred_element_type=F32).astype(x.dtype), (xq, wq)


def _fwd(spec, x, w, state):
    out, (xq, wq) = _forward(spec, x, w, state)
    return out, (xq, wq, x, w, state)


def _bwd(spec, residuals, g):
    xq, wq, x, w, state = residuals
    gq = quantize_dequantize(g, E5M2, state["grad"]["scale"], g.dtype)
    _, vjp = jax.vjp(lambda a, b: jnp.einsum(spec, a, b, preferred_element_type=F32).astype(g.dtype), xq, wq)
    dx, dw = vjp(gq)
    updated = {
        "x": observed(state["x"], x, E4M3),
        "w": observed(state["w"], w, E4M3),
        "grad": observed(state["grad"], g, E5M2),
    }
    return dx.astype(x.dtype), dw.astype(w.dtype), updated


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
