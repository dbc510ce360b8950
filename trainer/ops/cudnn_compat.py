"""JAX's cuDNN flash-attention primitives: the one place longctx touches them.

They are not public API: `jax.nn.dot_product_attention(implementation="cudnn")` wraps them but
returns neither the fp32 log-sum-exp a ring must merge in nor a backward that takes the *global*
output and log-sum-exp. The primitives have both: the forward in training mode returns the
softmax statistics (natural-log log-sum-exp of the scaled logits, fp32 [b, heads, t]); the
backward takes them with the output and recomputes the block's probabilities from them, which is
the flash-attention ring backward.

Their operands and parameters are free to change between JAX releases. In 0.11.2 and 0.12.0.1
both take query, key, value, seven optional operands (bias, sequence lengths and offsets,
paged-attention tables) and, the backward, the stats, output and output gradient; then scale,
seed, dropout_rate, variadic_args, mask_type, layout, sliding_window_length and, forward only,
is_training. 0.12 adds flex attention: any number of trailing score-modifier operands (none here)
and the parameters score_mod_name and score_mod_jaxpr (None: no modifier), which its abstract
rules hide behind **kwargs; the CUDA lowering rules name every parameter in both. So the call is
built by name: operands from the abstract rule's positional parameters, parameters from the
lowering rule's; one this module does not know raises NotImplementedError naming it, at trace
time, on CPU too (tests/unit/trainer/test_attention_cudnn_lowering.py lowers the ring for CUDA on
a CPU mesh), instead of a silent miscompile on the GPU.

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


def _bind(primitive, abstract, lowering, operands: dict, params: dict):
    """primitive.bind with operands matched by name to `abstract`'s positional parameters and
    parameters to the rest of the CUDA rule `lowering`'s (after its context); variadic trailing
    operands (0.12's score-modifier arguments) are passed none."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    names = [p.name for p in inspect.signature(abstract).parameters.values() if p.kind in positional]
    rule = list(inspect.signature(lowering).parameters.values())[1:]
    keywords = [p.name for p in rule if p.kind not in variadic and p.name not in names]
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
        score_mod_name=None,  # 0.12+: no flex-attention score modifier
        score_mod_jaxpr=None,
        is_training=True,
    )


def flash_forward(q, k, v, *, scale: float, causal: bool):
    """(out [b, t, heads, d] in q's dtype, lse fp32 [b, t, heads]); q [b, t, heads, d], k/v
    [b, s, kv_heads, d] (GQA: heads a multiple of kv_heads), bf16 or fp16. `causal`: query i sees
    keys j <= i (t == s)."""
    out, stats = _bind(
        _fa._dot_product_attention_fwd_p,
        _fa._dot_product_attention_fwd_abstract,
        _fa._dot_product_attention_fwd_cuda_lowering,
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
        _fa._dot_product_attention_bwd_cuda_lowering,
        dict(query=q, key=k, value=v, activation=jnp.transpose(lse, (0, 2, 1)), fwd_output=out, grad_output=do),
        _params(scale, causal),  # is_training is the forward's only
    )
    return dq, dk, dv
