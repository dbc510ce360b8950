"""FPDT-style chunking and host offload: same numbers as unchunked attention, smaller temporaries.

Tolerance: fp32, element by element (chunking only reorders sums); measured 2026-11-24 over the
cases below: at most 1.6e-6 absolute on entries below 0.1 and 1.2e-5 relative on the others,
about 3x below the tolerance's terms. A K/V prefetch one chunk behind errs by 2 to 7 and must
fail the same checks.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType

from longctx_trainer.contract.config import OffloadConfig, TrainerConfig
from longctx_trainer.contract.presets import preset
from longctx_trainer.ops import (
    chunked,
    context_parallel_attention,
    inverse_permutation,
    offload,
    permutation,
    reference_attention,
)
from longctx_trainer.ops.chunked import FULL, MASKED, SKIP, Span, _relation
from longctx_trainer.train import StepFunctions
from support import mutants

BATCH, SEQ, HEADS, HEAD_DIM = 2, 128, 8, 16
FP32 = dict(rtol=3e-5, atol=8e-6)  # as in test_attention_context_parallel.py


def make_mesh(data, context, tensor):
    return jax.make_mesh(
        (data, context, tensor),
        ("data", "context", "tensor"),
        axis_types=(AxisType.Auto,) * 3,
        devices=jax.devices()[: data * context * tensor],
    )


def inputs(kv_heads, seq=SEQ):
    keys = jax.random.split(jax.random.key(2), 4)
    q = jax.random.normal(keys[0], (BATCH, seq, HEADS, HEAD_DIM))
    k, v = (jax.random.normal(key, (BATCH, seq, kv_heads, HEAD_DIM)) for key in keys[1:3])
    return q, k, v, jax.random.normal(keys[3], q.shape)


def attention_and_grads(mesh, kv_heads, **options):
    """Output and input gradients in natural order, computed in the load-balancing order."""
    context, scheme = mesh.shape["context"], options["load_balance"]
    perm, inverse = permutation(SEQ, context, scheme), inverse_permutation(SEQ, context, scheme)

    @jax.jit
    def run(q, k, v, do):
        attend = functools.partial(context_parallel_attention, mesh=mesh, causal=True, **options)
        out, vjp = jax.vjp(attend, q[:, perm], k[:, perm], v[:, perm])
        return [x[:, inverse] for x in (out, *vjp(do[:, perm]))]

    return run(*inputs(kv_heads))


@functools.cache
def reference_and_grads(kv_heads):
    q, k, v, do = inputs(kv_heads)
    out, vjp = jax.vjp(functools.partial(reference_attention, causal=True), q, k, v)
    return [out, *vjp(do)]


def assert_all_close(actual, expected):
    for name, a, e in zip(("out", "dq", "dk", "dv"), actual, expected, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(e), err_msg=name, **FP32)


# (impl, (data, context, tensor), kv_heads, load_balance, chunk_tokens, offload)
CASES = [
    ("ring", (1, 4, 2), 2, "dual_chunk_swap", 8, False),
    ("ring", (1, 8, 1), 1, "striped", 4, True),
    ("all_gather", (2, 4, 1), 8, "dual_chunk_swap", 16, True),
    ("ring", (2, 1, 1), 2, "none", 32, True),
    ("ulysses", (1, 4, 2), 2, "dual_chunk_swap", 8, True),  # chunks of the whole sequence, K/V repeated
]


@pytest.mark.parametrize("impl,layout,kv_heads,load_balance,chunk_tokens,offload", CASES)
def test_chunked_matches_reference(impl, layout, kv_heads, load_balance, chunk_tokens, offload):
    result = attention_and_grads(
        make_mesh(*layout), kv_heads, impl=impl, load_balance=load_balance, chunk_tokens=chunk_tokens, offload=offload
    )
    assert_all_close(result, reference_and_grads(kv_heads))


def test_chunked_offloaded_hybrid_matches_reference():
    """Ulysses groups of 2 in a ring of 4: chunks within each ring step, residuals offloaded."""
    options = dict(impl="hybrid", ulysses=2, load_balance="dual_chunk_swap", chunk_tokens=4, offload=True)
    assert_all_close(attention_and_grads(make_mesh(1, 8, 1), 2, **options), reference_and_grads(2))


def test_chunked_offloaded_equals_unchunked():
    mesh, options = make_mesh(1, 4, 2), dict(impl="ring", load_balance="dual_chunk_swap")
    whole = attention_and_grads(mesh, 2, chunk_tokens=None, offload=False, **options)
    chunked = attention_and_grads(mesh, 2, chunk_tokens=8, offload=True, **options)
    assert_all_close(chunked, whole)


@pytest.mark.parametrize(
    "check",
    [
        lambda: test_chunked_matches_reference(*CASES[2]),  # all-gather, K/V chunks fetched from host
        test_chunked_offloaded_equals_unchunked,  # ring, chunks within each step
    ],
    ids=["all_gather_offloaded", "ring_chunked"],
)
def test_checks_fail_when_the_kv_prefetch_lags_one_chunk(check, monkeypatch):
    mutants.stale_kv_prefetch(monkeypatch)
    with pytest.raises(AssertionError):
        check()


@pytest.mark.parametrize(
    "impl,layout", [("ring", (1, 2, 1)), ("all_gather", (1, 2, 1)), ("ulysses", (1, 2, 1)), ("ring", (2, 1, 1))]
)
def test_host_placement_path_keeps_the_numbers(impl, layout, monkeypatch):
    """CPU skips placement (its device memory is host memory); force the GPU code path here.

    The traced program then really holds host-memory values (K/V chunks for all-gather, Ulysses
    and context 1, residuals always), checked in its jaxpr; XLA's CPU backend lowers the transfers
    as no-ops, so this proves the program is valid and exact, not that bytes move.
    """
    assert not offload.host_offload_available("cpu")
    monkeypatch.setattr(offload, "host_offload_available", lambda platform=None: True)
    mesh = make_mesh(*layout)
    options = dict(mesh=mesh, causal=True, impl=impl, load_balance="dual_chunk_swap", chunk_tokens=16, offload=True)
    q, k, v, do = inputs(2)

    def gradients(q, k, v):
        return jax.vjp(functools.partial(context_parallel_attention, **options), q, k, v)[1](q)

    assert "<host>" in str(jax.make_jaxpr(gradients)(q, k, v))
    options.pop("mesh"), options.pop("causal")
    result = attention_and_grads(mesh, 2, **options)
    assert_all_close(result, reference_and_grads(2))


def test_causal_chunk_pairs_are_classified_for_skipping():
    early, late = jnp.arange(0, 8), jnp.arange(8, 16)
    assert int(_relation(Span(early), Span(late))) == SKIP  # every key in every query's future
    assert int(_relation(Span(late), Span(early))) == FULL  # every key visible: no mask needed
    assert int(_relation(Span(late), Span(late))) == MASKED
    assert _relation(Span(), Span()) == FULL  # non-causal


def test_chunking_shrinks_compiled_temporaries():
    """Single device, 1024 tokens: chunks of 128 hold 64x smaller logits than one 1024^2 block."""
    mesh, seq = make_mesh(1, 1, 1), 1024
    q, k, v, do = inputs(kv_heads=2, seq=seq)

    def temp_bytes(chunk_tokens):
        def loss(q, k, v):
            out = context_parallel_attention(
                q, k, v, mesh=mesh, causal=True, load_balance="none", chunk_tokens=chunk_tokens
            )
            return jnp.sum(out * do)

        compiled = jax.jit(jax.grad(loss, argnums=(0, 1, 2))).lower(q, k, v).compile()
        return compiled.memory_analysis().temp_size_in_bytes

    whole, chunked = temp_bytes(None), temp_bytes(128)
    assert chunked * 4 < whole, (chunked, whole)


def training_step_temp_bytes(seq: int, chunk: int) -> int:
    """Compiled temporaries of a whole training step of the tiny model (layers under a scan, remat)."""
    config = TrainerConfig(
        model=preset("tiny"),
        sequence_length=seq,
        global_batch_tokens=seq,
        steps=1,
        offload=OffloadConfig(enabled=True, chunk_tokens=chunk),
    )
    fns = StepFunctions(config, make_mesh(1, 1, 1))
    tokens = jax.ShapeDtypeStruct((1, seq), jnp.int32)
    return fns.step.lower(fns.abstract_state(), tokens, tokens, None).compile().memory_analysis().temp_size_in_bytes


def all_pair_logits_bytes(seq: int, chunk: int) -> int:
    """fp32 logits of every chunk pair at once, all heads: what chunking must never hold."""
    return (seq // chunk) ** 2 * 4 * chunk * chunk * preset("tiny").heads


def test_chunking_bounds_the_training_steps_temporaries():
    """Measured 2026-11-26 at 16K tokens in chunks of 1024: 0.25 GiB, against 11.3 GiB when JAX
    hoisted every chunk pair's masks out of the scan over layers (ops/chunked.py `_tied`), and
    8 GiB of logits for all pairs."""
    seq, chunk = 8192, 512
    assert training_step_temp_bytes(seq, chunk) < all_pair_logits_bytes(seq, chunk) / 8


def test_the_bound_fails_when_the_masks_are_hoisted(monkeypatch):
    monkeypatch.setattr(chunked, "_tied", lambda q, q_span, k_span: (q, q_span, k_span))
    seq, chunk = 8192, 512
    assert training_step_temp_bytes(seq, chunk) > all_pair_logits_bytes(seq, chunk) / 8


def test_chunk_that_does_not_divide_the_shard_is_rejected():
    q, k, v, _ = inputs(kv_heads=2)
    with pytest.raises(ValueError, match="chunk_tokens"):
        context_parallel_attention(q, k, v, mesh=make_mesh(1, 4, 1), causal=True, load_balance="none", chunk_tokens=24)
