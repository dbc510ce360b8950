"""trainer/doc_balance.py, the documents layout: a permutation that keeps each document's causal
order under the kernels' static mask positions, balances the masked work (max/mean <= 1.10 where
dual-chunk-swap gives 1.55 and 1.72), and gives the fp32 reference's attention forward and
gradients with every implementation on 8 CPU devices; mutants of the layout fail. The data path
lays the batch out, and a tiny model trained with it follows the fixed layout's loss curve.
"""

import functools
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer import data, doc_balance
from longctx_trainer.contract.config import (
    DataConfig,
    OptimizerConfig,
    PackingConfig,
    ParallelConfig,
)
from longctx_trainer.contract.load_balance import permutation
from longctx_trainer.doc_balance import device_work, document_lengths, document_permutation, layout_block
from longctx_trainer.mesh import make_mesh as make_trainer_mesh
from longctx_trainer.ops import attention, context_parallel_attention
from support.attention import (
    FP32,
    SEQ,
    assert_matches_reference,
    case_id,
    document_ids,
    inputs,
    make_mesh,
    masked_reference,
    packed_segments,
)
from support.benchmarks import benchmark
from support.tiny import tiny_trainer_config
from support.training import step_losses

document_segments = benchmark("corpus").document_segments  # the benchmarks' own distribution

SEED = 3  # the random lengths of packed_segments's second row


def test_layout_is_a_permutation_keeping_each_documents_order():
    for segments in (
        *packed_segments(SEED),
        document_ids([SEQ]),
        document_ids([1] * SEQ),
        document_segments(4096, 300)[0],
    ):
        for context in (1, 2, 4, 8):
            perm = document_permutation(segments, context)
            assert sorted(perm) == list(range(len(segments)))
            keys = np.empty_like(perm)
            keys[perm] = permutation(len(segments), context, doc_balance.MASK_LAYOUT)  # key of each true position
            for doc in np.unique(segments):
                assert np.all(np.diff(keys[segments == doc]) > 0)  # causal order = key order


def test_one_document_is_dual_chunk_swap():
    np.testing.assert_array_equal(document_permutation(document_ids([SEQ]), 8), permutation(SEQ, 8, "dual_chunk_swap"))


@pytest.mark.parametrize("seq, before", [(8192, 1.55), (32768, 1.72)])
def test_masked_work_is_balanced_on_the_benchmark_documents(seq, before):
    """benchmarks/attention_cpu.py's row: 2K-token documents on average, context 8."""
    segments = document_segments(seq, 2048)[0]
    fixed = device_work(segments, permutation(seq, 8, "dual_chunk_swap"), 8)
    balanced = device_work(segments, document_permutation(segments, 8), 8)
    assert round(fixed.max() / fixed.mean(), 2) == before
    assert balanced.max() / balanced.mean() <= 1.10
    assert balanced.sum() == fixed.sum()


@pytest.mark.parametrize("seq", [8192, 32768])
def test_blocks_hold_one_document_as_in_the_natural_order(seq):
    """The kernels skip chunk pairs of different documents: the layout's blocks (the kernels'
    chunks) hold no more mixed documents than dual-chunk-swap's contiguous ones do."""
    segments = document_segments(seq, 2048)[0]
    block = layout_block(seq // 16)

    def mixed(perm):
        return sum(len(np.unique(b)) > 1 for b in segments[perm].reshape(-1, block))

    assert mixed(document_permutation(segments, 8)) <= mixed(permutation(seq, 8, "dual_chunk_swap"))


def test_document_lengths():
    np.testing.assert_array_equal(document_lengths(document_ids([1, 4, 1, 1, 9])), [1, 4, 1, 1, 9])


def laid_out(context):
    """Per-row permutations and their inverses for `packed_segments`."""
    perms = np.stack([document_permutation(row, context) for row in packed_segments(SEED)])
    return perms, np.argsort(perms, axis=1)


def documents_context_parallel(mesh, *, kv_heads, causal, **options):
    """Output and (dq, dk, dv) in natural order, computed in the documents layout."""
    perms, inverses = laid_out(mesh.shape["context"])

    def rows(x, index):
        return jnp.take_along_axis(x, jnp.asarray(index).reshape(*index.shape, *(1,) * (x.ndim - 2)), axis=1)

    segments = rows(jnp.asarray(packed_segments(SEED)), perms)

    @jax.jit
    def run(q, k, v, do):
        attend = functools.partial(
            context_parallel_attention, mesh=mesh, causal=causal, segments=segments, load_balance="documents", **options
        )
        out, vjp = jax.vjp(attend, rows(q, perms), rows(k, perms), rows(v, perms))
        return rows(out, inverses), tuple(rows(g, inverses) for g in vjp(rows(do, perms)))

    (q, k, v), do = inputs(kv_heads)
    return run(q, k, v, do)


CASES = [
    ("ring", (1, 8, 1), True, 2, {}),
    ("ring", (2, 4, 1), True, 8, dict(chunk_tokens=4, offload=True)),
    ("ring", (1, 4, 2), False, 2, {}),
    ("all_gather", (1, 8, 1), True, 1, {}),
    ("ulysses", (1, 8, 1), True, 8, {}),
    ("hybrid", (1, 8, 1), True, 2, dict(ulysses=2)),
]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_documents_layout_matches_reference_forward_and_gradients(case):
    impl, layout, causal, kv_heads, options = case
    result = documents_context_parallel(make_mesh(*layout), kv_heads=kv_heads, causal=causal, impl=impl, **options)
    assert_matches_reference(result, masked_reference(kv_heads, causal, SEED), FP32)


def _mask_by_layout_order(monkeypatch):
    """The kernels mask by the identity order of the slots instead of the dual-chunk-swap keys."""
    monkeypatch.setattr(attention, "MASK_LAYOUT", "none")


def _place_blocks_in_slot_order(monkeypatch):
    """Blocks filled in slot order (region i on device i // 2): no longer key order."""
    monkeypatch.setattr(doc_balance, "permutation", lambda seq, context, scheme: np.arange(seq))


@pytest.mark.parametrize("mutant", [_mask_by_layout_order, _place_blocks_in_slot_order])
@pytest.mark.parametrize("case", [CASES[0], CASES[4]], ids=case_id)
def test_documents_check_fails_on_mutant(mutant, case, monkeypatch):
    mutant(monkeypatch)
    with pytest.raises(AssertionError):
        test_documents_layout_matches_reference_forward_and_gradients(case)


def test_documents_needs_the_document_mask():
    with pytest.raises(ValueError, match="document_mask"):
        _config(4, "documents", document_mask=False)


def _config(context, load_balance, document_mask=True):
    return tiny_trainer_config(
        global_batch_tokens=128,
        steps=20,
        parallelism=ParallelConfig(context=context, attention="ring", load_balance=load_balance),
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=3),
        data=DataConfig(
            kind="text",
            path=str(Path(json.__file__).parent),
            seed=5,
            packing=PackingConfig(document_mask=document_mask, reset_positions=False),
        ),
        seed=2,
    )


def test_data_path_lays_each_row_out():
    config = _config(4, "documents")
    mesh = make_trainer_mesh(config.parallelism, jax.devices()[:4])
    laid = data.Batches(config, mesh).for_step(3)
    natural = data.Batches(_config(4, "dual_chunk_swap"), mesh).for_step(3)
    order = np.asarray(laid[2].order)
    assert natural[2].order is None and not np.array_equal(order, np.arange(64)[None].repeat(2, 0))
    for got, want in zip((laid[0], laid[1], *laid[2][:3]), (natural[0], natural[1], *natural[2][:3]), strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.take_along_axis(np.asarray(want), order, axis=1))
    for row, seg in zip(order, np.asarray(natural[2].segments), strict=True):
        np.testing.assert_array_equal(row, document_permutation(seg, 4))


def test_documents_layout_follows_the_fixed_layouts_loss_curve():
    """20 steps with the mask, context 4, fp32: documents against the default dual-chunk-swap."""
    documents, fixed = step_losses(_config(4, "documents")), step_losses(_config(4, "dual_chunk_swap"))
    assert len(documents) == len(fixed) == 20
    np.testing.assert_allclose(documents, fixed, rtol=0, atol=1e-4)
    assert fixed[-1] < fixed[0] - 1.0
