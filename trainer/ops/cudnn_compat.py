"""JAX's cuDNN flash-attention primitives: the one place longctx touches them.

They are not public API: `jax.nn.dot_product_attention(implementation="cudnn")` wraps them but
returns neither the fp32 log-sum-exp a ring must merge in nor a backward that takes the *global*
output and log-sum-exp. The primitives have both: the forward in training mode returns the
softmax statistics (natural-log log-sum-exp of the scaled logits, fp32 [b, heads, t]); the
backward takes them with the output and recomputes the block's probabilities from them, which is
the flash-attention ring backward.

Their positional operands and keyword parameters are free to change between JAX releases (the
sources of 0.10.2, 0.11.0 and main of 2026-08-08 agree: query, key, value, seven optional operands
(bias, sequence lengths and offsets, paged-attention tables), then scale, seed, dropout_rate,
variadic_args, mask_type, layout, sliding_window_length and, forward only, is_training; 0.11.2's
source was not at hand). So the call is built
from the primitive's own signature, by name: an operand or parameter this module does not know
raises NotImplementedError naming it, at trace time, on CPU too (tests/unit/trainer/
test_attention_cudnn_lowering.py lowers the ring for CUDA on a CPU mesh), instead of a silent
miscompile on the GPU.

Binding the primitives also skips the public wrappers' trace-time checks, which need a GPU:
`jax.nn.dot_product_attention(implementation="cudnn")` and the module's `dot_product_attention`
raise "cuDNN is not detected" on a CPU-only jaxlib (`check_cudnn_version`: no
`jax._src.lib.cuda_versions` without the CUDA plugin), even under `jax.export(platforms=["cuda"])`,
while the primitives' CUDA lowering rules are registered unconditionally and lower anywhere. The
shapes block.py's `cudnn_unsuitable` admits (bf16/fp16, head size a multiple of 8 up to 128; no bias,
no packing here) are ones those checks accept.
"""

from __future__ import annotations

import inspect

import jax.numpy as jnp

try:
    from jax._src.cudnn import fused_attention_stablehlo as _fa
except ImportError:  # a JAX without the module: the pure-JAX kernel runs everywhere
    _fa = None

F32 = jnp.float32
FORWARD_TARGET = "__cudnn$fmhaSoftmax"
BACKWARD_TARGET = "__cudnn$fmhaSoftmaxBackward"
"""The custom-call targets the two primitives lower to (no bias, no dropout)."""
_OPTIONAL_OPERANDS = {"bias", "q_seqlen", "kv_seqlen", "q_offsets", "kv_offsets", "page_table_k", "page_table_v"}
"""Operands passed empty (zero-size): no bias, no padding or packing, no paged K/V."""


def available() -> bool:
    return _fa is not None


def _bind(primitive, abstract, operands: dict, params: dict):
    """primitive.bind with operands and parameters matched to `abstract`'s signature by name."""
    signature = inspect.signature(abstract).parameters.values()
    names = [p.name for p in signature if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    keywords = [p.name for p in signature if p.kind is p.KEYWORD_ONLY]
    unknown = [n for n in names if n not in operands and n not in _OPTIONAL_OPERANDS]
    unknown += [n for n in keywords if n not in params]
    if unknown:
        raise NotImplementedError(
            f"this JAX's cuDNN attention ({primitive.name}) takes {unknown}, unknown to {__name__}"
        )
    unused = jnp.zeros(0, operands["query"].dtype)
    return primitive.bind(*(operands.get(n, unused) for n in names), **{n: params[n] for n in keywords})


def _params(scale: float, causal: bool) -> dict:
    return dict(
        scale=scale,
        seed=0,
        dropout_rate=0.0,
        variadic_args=(False, False),  # (has bias, has bias gradient)
        mask_type=_fa.MaskType.CAUSAL if causal else _fa.MaskType.NO_MASK,
        layout=_fa.AttentionLayout.BTNH.value,
        sliding_window_length=None,
        is_training=True,
    )


def flash_forward(q, k, v, *, scale: float, causal: bool):
    """(out [b, t, heads, d] in q's dtype, lse fp32 [b, t, heads]); q [b, t, heads, d], k/v
    [b, s, kv_heads, d] (GQA: heads a multiple of kv_heads), bf16 or fp16. `causal`: query i sees
    keys j <= i (t == s)."""
    out, stats = _bind(
        _fa._dot_product_attention_fwd_p,
        _fa._dot_product_attention_fwd_abstract,
        dict(query=q, key=k, value=v),
        _params(scale, causal),
    )
    return out, jnp.transpose(stats, (0, 2, 1))


def flash_backward(q, k, v, out, lse, do, *, scale: float, causal: bool):
    """(dq, dk, dv) in the inputs' dtype of this block's share of the attention, given the final
    output `out` (q's dtype) and log-sum-exp `lse` (fp32 [b, t, heads]) over the whole key range."""
    dq, dk, dv = _bind(
        _fa._dot_product_attention_bwd_p,
        _fa._dot_product_attention_bwd_abstract,
        dict(query=q, key=k, value=v, activation=jnp.transpose(lse, (0, 2, 1)), fwd_output=out, grad_output=do),
        _params(scale, causal),  # is_training is the forward's only
    )
    return dq, dk, dv
