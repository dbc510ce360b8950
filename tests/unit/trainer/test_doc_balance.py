"""trainer/doc_balance.py, the documents layout: a permutation that keeps each document's causal
order under the kernels' static mask positions, balances the masked work (max/mean <= 1.10 where
dual-chunk-swap gives 1.55 and 1.72), and gives the fp32 reference's attention forward and
gradients with every implementation on 8 CPU devices; mutants of the layout fail. The data path
lays the batch out, and a tiny model trained with it follows the fixed layout's loss curve.
"""

import functools
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer import data, doc_balance
from longctx_trainer.contract.config import (
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    PackingConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.contract.load_balance import permutation
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.doc_balance import device_work, document_lengths, document_permutation, layout_block
from longctx_trainer.mesh import make_mesh as make_trainer_mesh
from longctx_trainer.ops import attention, context_parallel_attention, reference_attention
from longctx_trainer.train import train
from support.attention import BATCH, FP32, SEQ, assert_matches_reference, inputs, make_mesh

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
from attention_cpu import document_segments  # noqa: E402  (the benchmark's own distribution)


def ids(lengths) -> np.ndarray:
    return np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)


def packed_segments(seed: int = 3) -> np.ndarray:
    """[BATCH, SEQ]: row 0 has one-token documents around one of 110 tokens, which spans every
    shard; row 1 random lengths from 1 to 24, several of one token."""
    rng = np.random.default_rng(seed)
    lengths, left = [], SEQ
    while left:
        length = min(left, int(rng.choice([1, 1, rng.integers(2, 25)])))
        lengths.append(length)
        left -= length
    assert lengths.count(1) > 1
    return np.stack([ids([1, 1, 3, 110, 1, 12]), ids(lengths)])[:BATCH]


def test_layout_is_a_permutation_keeping_each_documents_order():
    for segments in (*packed_segments(), ids([SEQ]), ids([1] * SEQ), document_segments(4096, 300)[0]):
        for context in (1, 2, 4, 8):
            perm = document_permutation(segments, context)
            assert sorted(perm) == list(range(len(segments)))
            keys = np.empty_like(perm)
            keys[perm] = permutation(len(segments), context, doc_balance.MASK_LAYOUT)  # key of each true position
            for doc in np.unique(segments):
                assert np.all(np.diff(keys[segments == doc]) > 0)  # causal order = key order


def test_one_document_is_dual_chunk_swap():
    np.testing.assert_array_equal(document_permutation(ids([SEQ]), 8), permutation(SEQ, 8, "dual_chunk_swap"))


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
    np.testing.assert_array_equal(document_lengths(ids([1, 4, 1, 1, 9])), [1, 4, 1, 1, 9])


def laid_out(context):
    """Per-row permutations and their inverses for `packed_segments`."""
    perms = np.stack([document_permutation(row, context) for row in packed_segments()])
    return perms, np.argsort(perms, axis=1)


@functools.cache
def masked_reference(kv_heads, causal):
    (q, k, v), do = inputs(kv_heads)
    segments = jnp.asarray(packed_segments())
    out, vjp = jax.vjp(functools.partial(reference_attention, causal=causal, segments=segments), q, k, v)
    return out, vjp(do)


def documents_context_parallel(mesh, *, kv_heads, causal, **options):
    """Output and (dq, dk, dv) in natural order, computed in the documents layout."""
    perms, inverses = laid_out(mesh.shape["context"])

    def rows(x, index):
        return jnp.take_along_axis(x, jnp.asarray(index).reshape(*index.shape, *(1,) * (x.ndim - 2)), axis=1)

    segments = rows(jnp.asarray(packed_segments()), perms)

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


def _id(case):
    impl, layout, causal, kv_heads, options = case
    extra = "-".join(f"{k}={v}" for k, v in options.items())
    return f"{impl}-{'x'.join(map(str, layout))}-{'causal' if causal else 'full'}-kv{kv_heads}-{extra}"


@pytest.mark.parametrize("case", CASES, ids=_id)
def test_documents_layout_matches_reference_forward_and_gradients(case):
    impl, layout, causal, kv_heads, options = case
    result = documents_context_parallel(make_mesh(*layout), kv_heads=kv_heads, causal=causal, impl=impl, **options)
    assert_matches_reference(result, masked_reference(kv_heads, causal), FP32)


def _mask_by_layout_order(monkeypatch):
    """The kernels mask by the identity order of the slots instead of the dual-chunk-swap keys."""
    monkeypatch.setattr(attention, "MASK_LAYOUT", "none")


def _place_blocks_in_slot_order(monkeypatch):
    """Blocks filled in slot order (region i on device i // 2): no longer key order."""
    monkeypatch.setattr(doc_balance, "permutation", lambda seq, context, scheme: np.arange(seq))


@pytest.mark.parametrize("mutant", [_mask_by_layout_order, _place_blocks_in_slot_order])
@pytest.mark.parametrize("case", [CASES[0], CASES[4]], ids=_id)
def test_documents_check_fails_on_mutant(mutant, case, monkeypatch):
    mutant(monkeypatch)
    with pytest.raises(AssertionError):
        test_documents_layout_matches_reference_forward_and_gradients(case)


def test_documents_needs_the_document_mask():
    with pytest.raises(ValueError, match="document_mask"):
        _config(4, "documents", document_mask=False)


def _config(context, load_balance, document_mask=True):
    return TrainerConfig(
        model=ModelConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256),
        sequence_length=64,
        global_batch_tokens=128,
        steps=20,
        precision="fp32",
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


def _losses(config) -> list[float]:
    events = []
    train(
        config,
        make_trainer_mesh(config.parallelism, jax.devices()[: config.parallelism.context]),
        emit=events.append,
        metrics=TrainMetrics("test", 0),
        peak_flops_per_device=1e12,
    )
    return [e["loss"] for e in events if e["event"] == "step"]


def test_documents_layout_follows_the_fixed_layouts_loss_curve():
    """20 steps with the mask, context 4, fp32: documents against the default dual-chunk-swap."""
    documents, fixed = _losses(_config(4, "documents")), _losses(_config(4, "dual_chunk_swap"))
    assert len(documents) == len(fixed) == 20
    np.testing.assert_allclose(documents, fixed, rtol=0, atol=1e-4)
    assert fixed[-1] < fixed[0] - 1.0
