"""Ring, all-gather, Ulysses, hybrid and TokenRing context-parallel attention on 8 CPU devices
against the fp32 reference.

Each case runs one jitted function (output and input gradients through the custom VJPs) on
inputs laid out in the load-balancing order, undoes the order, and compares with the
single-device reference on natural-order inputs, element by element:
|actual - expected| <= atol + rtol * |expected| (tolerances below, each from measured errors).
Each numeric check also runs against mutants (tests/support/mutants.py) and must fail on them.
"""

import functools

import jax
import jax.numpy as jnp
import pytest

from longctx_trainer.contract.config import ulysses_kv_repeat
from longctx_trainer.ops import context_parallel_attention, inverse_permutation, permutation, reference_attention
from support import mutants
from support.attention import FP32, SEQ, assert_matches_reference, inputs, make_mesh


@functools.cache
def reference_with_grads(kv_heads, causal, dtype=jnp.float32, q_scale=1.0):
    """fp32 reference on the inputs as the implementation sees them (rounded to `dtype`)."""
    (q, k, v), do = inputs(kv_heads, dtype, q_scale)
    q, k, v, do = (x.astype(dtype).astype(jnp.float32) for x in (q, k, v, do))
    out, vjp = jax.vjp(functools.partial(reference_attention, causal=causal), q, k, v)
    return out, vjp(do)


def context_parallel_with_grads(mesh, *, kv_heads, causal, dtype=jnp.float32, q_scale=1.0, **options):
    """Output and (dq, dk, dv) in natural token order, computed in the layout order."""
    context, scheme = mesh.shape["context"], options.get("load_balance", "dual_chunk_swap")
    perm, inverse = permutation(SEQ, context, scheme), inverse_permutation(SEQ, context, scheme)

    @jax.jit
    def run(q, k, v, do):
        attend = functools.partial(context_parallel_attention, mesh=mesh, causal=causal, **options)
        out, vjp = jax.vjp(attend, q[:, perm], k[:, perm], v[:, perm])
        grads = vjp(do[:, perm].astype(dtype))
        return out[:, inverse], tuple(g[:, inverse] for g in grads)

    (q, k, v), do = inputs(kv_heads, dtype, q_scale)
    return run(q, k, v, do)


# (impl, (data, context, tensor), causal, kv_heads, load_balance): every context size, causal and
# not, heads 8/8, 8/2 and 8/1, each layout, and a tensor axis > 1, for every implementation.
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
    # Ulysses: K/V heads split over the context axis (8 over 2, 4 over 4) or repeated 2, 4 or 8 times.
    ("ulysses", (2, 2, 1), True, 8, "dual_chunk_swap"),
    ("ulysses", (2, 2, 2), True, 2, "dual_chunk_swap"),
    ("ulysses", (1, 4, 2), True, 8, "striped"),
    ("ulysses", (2, 4, 1), False, 2, "none"),
    ("ulysses", (1, 8, 1), True, 2, "dual_chunk_swap"),
    ("ulysses", (1, 8, 1), True, 1, "none"),
    # TokenRing: queries travel, partial outputs return; every layout, GQA, a tensor axis.
    ("token_ring", (1, 8, 1), True, 2, "dual_chunk_swap"),
    ("token_ring", (1, 8, 1), False, 1, "none"),
    ("token_ring", (1, 8, 1), True, 8, "striped"),
    ("token_ring", (1, 4, 2), False, 8, "dual_chunk_swap"),
    ("token_ring", (2, 2, 2), True, 2, "dual_chunk_swap"),
]
# Hybrid: (impl, layout, causal, kv_heads, load_balance, ulysses group size): Ulysses groups of 2 or
# 4 inside a ring of 4 or 2, K/V heads split or repeated, with and without a tensor axis.
HYBRID_CASES = [
    ("hybrid", (1, 8, 1), True, 2, "dual_chunk_swap", 2),
    ("hybrid", (1, 8, 1), True, 1, "striped", 4),
    ("hybrid", (1, 4, 2), True, 8, "dual_chunk_swap", 2),
    ("hybrid", (2, 4, 1), False, 2, "none", 2),
]


@pytest.mark.parametrize(
    "impl,layout,causal,kv_heads,load_balance",
    CASES,
    ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x),
)
def test_matches_reference_forward_and_gradients(impl, layout, causal, kv_heads, load_balance):
    result = context_parallel_with_grads(
        make_mesh(*layout), kv_heads=kv_heads, causal=causal, impl=impl, load_balance=load_balance
    )
    assert_matches_reference(result, reference_with_grads(kv_heads, causal), FP32)


@pytest.mark.parametrize(
    "impl,layout,causal,kv_heads,load_balance,ulysses",
    HYBRID_CASES,
    ids=lambda x: "x".join(map(str, x)) if isinstance(x, tuple) else str(x),
)
def test_hybrid_matches_reference_forward_and_gradients(impl, layout, causal, kv_heads, load_balance, ulysses):
    result = context_parallel_with_grads(
        make_mesh(*layout), kv_heads=kv_heads, causal=causal, impl=impl, load_balance=load_balance, ulysses=ulysses
    )
    assert_matches_reference(result, reference_with_grads(kv_heads, causal), FP32)


def test_hybrid_check_fails_when_the_ring_skips_a_rotation(monkeypatch):
    mutants.skip_one_ring_rotation(monkeypatch)
    with pytest.raises(AssertionError):
        test_hybrid_matches_reference_forward_and_gradients(*HYBRID_CASES[0])


def test_hybrid_needs_a_real_ring_and_real_groups():
    (q, k, v), _ = inputs(8)
    for ulysses in (1, 3, 8):
        with pytest.raises(ValueError, match="hybrid attention needs parallelism.ulysses"):
            context_parallel_attention(q, k, v, mesh=make_mesh(1, 8, 1), causal=True, impl="hybrid", ulysses=ulysses)


MUTANT_CASE = ("ring", (1, 4, 1), True, 2, "dual_chunk_swap")


@pytest.mark.parametrize(
    "mutant",
    [
        mutants.drop_causal_mask_on_first_block,
        mutants.skip_one_ring_rotation,
        mutants.lose_attention_scale,
        mutants.every_ring_step_from_an_earlier_member,
    ],
    ids=lambda m: m.__name__,
)
def test_fp32_check_fails_on_mutant(mutant, monkeypatch):
    mutant(monkeypatch)
    with pytest.raises(AssertionError):
        test_matches_reference_forward_and_gradients(*MUTANT_CASE)


def test_fp32_check_fails_when_token_ring_partials_return_to_the_wrong_owner(monkeypatch):
    mutants.return_token_ring_partials_to_the_wrong_owner(monkeypatch)
    with pytest.raises(AssertionError):
        test_matches_reference_forward_and_gradients("token_ring", (1, 8, 1), True, 2, "dual_chunk_swap")


def test_fp32_check_fails_when_ulysses_pairs_query_heads_with_the_wrong_kv_heads(monkeypatch):
    mutants.tile_ulysses_kv_heads(monkeypatch)
    with pytest.raises(AssertionError):
        test_matches_reference_forward_and_gradients("ulysses", (1, 8, 1), True, 2, "dual_chunk_swap")


@pytest.mark.parametrize(
    "heads,kv_heads,context,expected",
    [(8, 8, 4, 1), (8, 2, 2, 1), (8, 2, 8, 4), (8, 1, 8, 8), (32, 8, 16, 2), (8, 2, 16, None), (8, 3, 4, None)],
)
def test_ulysses_kv_repeat_rule(heads, kv_heads, context, expected):
    if expected is None:
        with pytest.raises(ValueError, match="Ulysses attention needs"):
            ulysses_kv_repeat(heads, kv_heads, context)
    else:
        assert ulysses_kv_repeat(heads, kv_heads, context) == expected


# bf16: q scaled by 3 so that logits spread as in a trained model (log-sum-exp 5 to 9, where
# bf16's spacing is 1/32 to 1/16); inputs rounded to bf16 for the reference too, so only the
# kernel's own rounding counts. rtol is one bf16 step (2^-8), for the final rounding. Measured
# 2026-11-24 (ring / all-gather, largest absolute error; entries reach 2.5 / 13 / 23 / 27):
# out 7.8e-3, dq 1.5e-2, dk 6.1e-2 / 6.3e-2, dv 3.5e-2 / 3.5e-2; the worst entry uses 65% of its
# tolerance. The ring with its blocks' log-sum-exp rounded to bf16 errs by 3.8e-2, 5.4e-2, 0.18
# and 0.21: 1.9x to 3.7x its tolerance, in every one of the four.
BF16_Q_SCALE = 3.0
BF16 = {
    "out": dict(rtol=2**-8, atol=1e-2),
    "dq": dict(rtol=2**-8, atol=2e-2),
    "dk": dict(rtol=2**-8, atol=8e-2),
    "dv": dict(rtol=2**-8, atol=5e-2),
}


@pytest.mark.parametrize("impl", ["ring", "all_gather", "ulysses", "hybrid", "token_ring"])
def test_bf16_within_bf16_tolerance(impl):
    result = context_parallel_with_grads(
        make_mesh(1, 8, 1),
        kv_heads=2,
        causal=True,
        dtype=jnp.bfloat16,
        q_scale=BF16_Q_SCALE,
        impl=impl,
        **({"ulysses": 2} if impl == "hybrid" else {}),
    )
    assert result[0].dtype == jnp.bfloat16
    reference = reference_with_grads(2, True, jnp.bfloat16, BF16_Q_SCALE)
    assert_matches_reference(result, reference, BF16)


def test_bf16_check_fails_when_the_ring_merges_bf16_log_sum_exps(monkeypatch):
    mutants.round_block_lse_to_bf16(monkeypatch)
    with pytest.raises(AssertionError):
        test_bf16_within_bf16_tolerance("ring")


def test_unknown_impl_is_rejected():
    (q, k, v), _ = inputs(8)
    with pytest.raises(ValueError, match="impl"):
        context_parallel_attention(q, k, v, mesh=make_mesh(1, 8, 1), causal=True, impl="tree")
