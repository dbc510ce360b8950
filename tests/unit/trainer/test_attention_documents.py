"""Packed documents: every attention implementation, with a document mask, against the fp32
reference given the same mask explicitly, forward and gradients, on 8 CPU devices.

Documents have random lengths, including documents of one token and one document that spans every
context shard in every load-balancing layout. Tolerances are the fp32 ones of the unmasked tests
(test_attention_context_parallel.py): the mask only removes terms. Mutants that attend across
documents, or skip the wrong chunk pairs, must fail.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer.ops import context_parallel_attention, inverse_permutation, permutation, reference_attention
from longctx_trainer.ops.chunked import FULL, MASKED, SKIP, Span, _relation
from support import mutants
from support.attention import (
    FP32,
    SEQ,
    assert_matches_reference,
    case_id,
    inputs,
    make_mesh,
    masked_reference,
    packed_segments,
)

SEED = 0  # the random lengths of packed_segments's second row


def masked_context_parallel(mesh, *, kv_heads, causal, **options):
    """Output and (dq, dk, dv) in natural order; tokens and document ids in the layout order."""
    context, scheme = mesh.shape["context"], options.get("load_balance", "dual_chunk_swap")
    perm, inverse = permutation(SEQ, context, scheme), inverse_permutation(SEQ, context, scheme)
    segments = jnp.asarray(packed_segments(SEED))[:, perm]

    @jax.jit
    def run(q, k, v, do):
        attend = functools.partial(context_parallel_attention, mesh=mesh, causal=causal, segments=segments, **options)
        out, vjp = jax.vjp(attend, q[:, perm], k[:, perm], v[:, perm])
        return out[:, inverse], tuple(g[:, inverse] for g in vjp(do[:, perm]))

    (q, k, v), do = inputs(kv_heads)
    return run(q, k, v, do)


# (impl, (data, context, tensor), causal, kv_heads, options): every implementation; Ulysses at
# context 2, 4, 8; hybrid (Ulysses, ring) = (2, 2), (2, 4), (4, 2); heads 8/8, 8/2, 8/1; causal
# and not; chunked and host-offloaded (the offload is the identity on CPU, the code path is not).
CASES = [
    ("ring", (1, 8, 1), True, 2, dict(load_balance="dual_chunk_swap")),
    ("ring", (1, 4, 2), True, 8, dict(load_balance="striped")),
    ("ring", (2, 2, 1), False, 1, dict(load_balance="none")),
    ("ring", (1, 8, 1), True, 1, dict(load_balance="none", chunk_tokens=8)),
    ("ring", (1, 4, 1), True, 2, dict(load_balance="dual_chunk_swap", chunk_tokens=8, offload=True)),
    ("all_gather", (1, 8, 1), True, 2, dict(load_balance="dual_chunk_swap")),
    ("all_gather", (2, 4, 1), False, 8, dict(load_balance="striped")),
    ("all_gather", (1, 1, 1), True, 2, dict(load_balance="none", chunk_tokens=32, offload=True)),
    ("ulysses", (1, 2, 1), True, 8, dict(load_balance="dual_chunk_swap")),
    ("ulysses", (1, 4, 2), True, 8, dict(load_balance="striped")),
    ("ulysses", (2, 4, 1), False, 2, dict(load_balance="none")),
    ("ulysses", (1, 8, 1), True, 1, dict(load_balance="dual_chunk_swap", chunk_tokens=4)),
    ("hybrid", (1, 4, 1), True, 2, dict(load_balance="dual_chunk_swap", ulysses=2)),
    ("hybrid", (1, 8, 1), True, 2, dict(load_balance="dual_chunk_swap", ulysses=2, chunk_tokens=8, offload=True)),
    ("hybrid", (1, 8, 1), True, 1, dict(load_balance="striped", ulysses=4)),
    ("hybrid", (2, 4, 1), False, 8, dict(load_balance="none", ulysses=2)),
    ("token_ring", (1, 8, 1), True, 2, dict(load_balance="dual_chunk_swap")),
    ("token_ring", (1, 8, 1), False, 1, dict(load_balance="none")),
    ("token_ring", (1, 4, 2), True, 8, dict(load_balance="striped", chunk_tokens=8, offload=True)),
]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_document_masked_matches_reference_forward_and_gradients(case):
    impl, layout, causal, kv_heads, options = case
    result = masked_context_parallel(make_mesh(*layout), kv_heads=kv_heads, causal=causal, impl=impl, **options)
    assert_matches_reference(result, masked_reference(kv_heads, causal, SEED), FP32)


def test_document_check_fails_when_token_ring_partials_return_to_the_wrong_owner(monkeypatch):
    mutants.return_token_ring_partials_to_the_wrong_owner(monkeypatch)
    with pytest.raises(AssertionError):
        test_document_masked_matches_reference_forward_and_gradients(CASES[16])


def test_the_mask_matters():
    """The masked reference differs from the unmasked one by far more than the tolerance, so the
    comparisons above could not pass without masking."""
    (q, k, v), _ = inputs(2)
    unmasked = reference_attention(q, k, v, causal=True)
    assert float(jnp.max(jnp.abs(masked_reference(2, True, SEED)[0] - unmasked))) > 0.5


@pytest.mark.parametrize("mutant", [mutants.ignore_document_mask, mutants.skip_pairs_of_one_document])
@pytest.mark.parametrize("case", [CASES[0], CASES[9], CASES[14], CASES[16]], ids=case_id)
def test_document_check_fails_on_mutant(mutant, case, monkeypatch):
    mutant(monkeypatch)
    with pytest.raises(AssertionError):
        test_document_masked_matches_reference_forward_and_gradients(case)


def test_chunk_pairs_of_different_documents_are_skipped():
    early, late = jnp.arange(0, 8), jnp.arange(8, 16)
    doc = functools.partial(jnp.full, (2, 8), dtype=jnp.int32)
    two_docs = jnp.asarray(np.repeat([[3, 4]], 4, axis=1).reshape(1, 8).repeat(2, 0))
    # Causally visible, but every key in an earlier document: nothing to compute.
    assert int(_relation(Span(late, doc(4)), Span(early, doc(3)))) == SKIP
    # Not causal, documents apart: skipped too.
    assert int(_relation(Span(None, doc(1)), Span(None, doc(2)))) == SKIP
    # One document on both sides, keys in the past: no mask needed.
    assert int(_relation(Span(late, doc(3)), Span(early, doc(3)))) == FULL
    assert int(_relation(Span(None, doc(3)), Span(None, doc(3)))) == FULL
    # A document boundary inside the pair: masked.
    assert int(_relation(Span(late, two_docs), Span(early, doc(3)))) == MASKED
    # One sequence of the batch still needs the pair: computed, not skipped.
    mixed = jnp.asarray([[3] * 8, [4] * 8], jnp.int32)
    assert int(_relation(Span(late, mixed), Span(early, doc(3)))) == MASKED
