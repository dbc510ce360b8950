"""Packed documents in the model: with the document mask, a document's loss does not depend on the
documents before it in the sequence; without it, it does. The data path's document fields.

Two sequences end with the same document D of real text (files of docs/) and begin with different
real documents of different lengths. With the document mask and per-document positions, every
prediction inside D has the same loss in both (fp32, to 2e-5 relative: the layouts differ only in
reduction order); without the mask the losses differ by far more. The sharded model (ring over a
context axis of 4, data 2) agrees with one device, so the mask is right across shards too.
"""

from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer import model
from longctx_trainer.contract.config import (
    DataConfig,
    OptimizerConfig,
    PackingConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.contract.flops import causal_pairs_within_documents, flops_per_token
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.contract.sources import document_layout, document_separator, text_bytes
from longctx_trainer.data import Batches, Documents
from longctx_trainer.mesh import make_mesh
from longctx_trainer.ops import inverse_permutation
from longctx_trainer.train import train
from support import mutants
from support.tiny import TINY_MODEL
from support.tiny_model import model_options

REPO = Path(__file__).resolve().parents[3]
MODEL = TINY_MODEL
SEQ = 256
SEPARATOR = 0  # NUL ends each byte-level document


def _documents() -> list[np.ndarray]:
    """Three real documents (byte-level, separator-terminated) and the shared last one, D."""
    texts = [(REPO / "docs" / name).read_bytes() for name in ("planner.md", "attention.md", "trainer.md", "cluster.md")]
    return [
        np.frombuffer(t[: n - 1] + b"\0", np.uint8).astype(np.int32)
        for t, n in zip(texts, (37, 60, 21, 140), strict=True)
    ]


def _windows() -> np.ndarray:
    """[2, SEQ + 1]: (A, B, D) and (C, D, ...) where ... is the start of a later document; D
    starts at token 97 in one and 21 in the other."""
    a, b, c, d = _documents()
    tail = np.frombuffer((REPO / "README.md").read_bytes(), np.uint8).astype(np.int32)
    first = np.concatenate([a, b, d, tail])[: SEQ + 1]
    second = np.concatenate([c, d, tail])[: SEQ + 1]
    return np.stack([first, second])


def _batch(windows):
    fields = [document_layout(w, SEPARATOR) for w in windows]
    documents = Documents(**{name: np.stack([f[name] for f in fields]) for name in fields[0]})
    return windows[:, :-1], windows[:, 1:], documents


def _options(document_mask: bool, reset_positions: bool = True) -> model.ModelOptions:
    return model_options(document_mask=document_mask, reset_positions=reset_positions)


ONE_DEVICE = ParallelConfig()


def token_losses(options, parallel=ONE_DEVICE) -> np.ndarray:
    """[2, SEQ] next-token loss of every prediction, natural order."""
    mesh = make_mesh(parallel, jax.devices()[: parallel.devices])
    lm = model.Model(MODEL, mesh, options)
    params = jax.jit(partial(model.init_params, MODEL), out_shardings=lm.param_shardings())(jax.random.key(3))
    hidden = jax.jit(lm.final_hidden)
    tokens, targets, documents = _batch(_windows())
    x, permuted_targets = hidden(params, tokens, targets, documents)
    logp = jax.nn.log_softmax(jnp.einsum("bsh,hv->bsv", x, params["lm_head"]), -1)
    losses = -jnp.take_along_axis(logp, permuted_targets[..., None], -1)[..., 0]
    inverse = inverse_permutation(SEQ, parallel.context, options.load_balance)
    return np.asarray(losses)[:, inverse]


def _shared_document_losses(losses) -> tuple[np.ndarray, np.ndarray]:
    """The losses of the predictions inside D (its separator's prediction of the next document excluded)."""
    a, b, c, d = _documents()
    first, second = len(a) + len(b), len(c)
    inside = len(d) - 1
    return losses[0, first : first + inside], losses[1, second : second + inside]


@pytest.mark.parametrize("parallel", [ParallelConfig(), ParallelConfig(data=2, context=4)], ids=["1dev", "dp2-cp4"])
def test_a_documents_loss_is_independent_of_the_documents_before_it(parallel):
    masked = _shared_document_losses(token_losses(_options(True), parallel))
    np.testing.assert_allclose(masked[0], masked[1], rtol=2e-5, atol=2e-6)
    unmasked = _shared_document_losses(token_losses(_options(False), parallel))
    assert np.max(np.abs(unmasked[0] - unmasked[1])) > 1e-2  # what the mask removes


def test_the_independence_check_fails_when_attention_crosses_documents(monkeypatch):
    mutants.ignore_document_mask(monkeypatch)
    with pytest.raises(AssertionError):
        test_a_documents_loss_is_independent_of_the_documents_before_it(ParallelConfig())


def test_sharded_document_masked_losses_equal_one_device():
    np.testing.assert_allclose(
        token_losses(_options(True), ParallelConfig(data=2, context=4)),
        token_losses(_options(True)),
        rtol=2e-5,
        atol=2e-6,
    )


def test_mean_loss_leaves_out_predictions_across_a_boundary():
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    params = model.init_params(MODEL, jax.random.key(3))
    tokens, targets, documents = _batch(_windows())
    losses = token_losses(_options(True))
    loss = model.Model(MODEL, mesh, _options(True)).loss(params, tokens, targets, documents)
    kept = documents.loss_mask
    assert not kept.all() and np.all(kept == (tokens != SEPARATOR))  # a separator's target starts a new document
    np.testing.assert_allclose(float(loss), losses[kept].mean(), rtol=1e-5)


def test_document_layout_of_a_window():
    window = np.array([5, 6, 0, 7, 0, 0, 8, 9])
    layout = document_layout(window, separator=0)
    np.testing.assert_array_equal(layout["segments"], [0, 0, 0, 1, 1, 2, 3])
    np.testing.assert_array_equal(layout["positions"], [0, 1, 2, 0, 1, 0, 0])
    np.testing.assert_array_equal(layout["loss_mask"], [True, True, False, True, False, False, True])
    # l^2 / 2 per document: 3, 2, 1 and the first token of the fourth (its l^2 / 2 is counted as
    # the window goes on).
    assert float(causal_pairs_within_documents(layout["positions"])) == (9 + 4 + 1 + 1) / 2


def test_document_flops_convention():
    one_document = flops_per_token(MODEL, SEQ)
    assert flops_per_token(MODEL, SEQ, causal_pairs=SEQ**2 / 2) == one_document
    halves = flops_per_token(MODEL, SEQ, causal_pairs=2 * (SEQ / 2) ** 2 / 2)
    assert halves.attention_causal * 2 == one_document.attention_causal
    assert halves.attention_full == one_document.attention_full and halves.dense == one_document.dense


def test_packed_text_trains_differently_with_the_document_mask(tmp_path):
    """The trainer end to end on packed real text (six of the repository's docs in one file, NUL
    after each): the same bytes train differently with the document mask, and MFU counts less
    attention work."""
    corpus = tmp_path / "corpus.txt"
    names = ("planner.md", "attention.md", "trainer.md", "cluster.md", "operator.md", "security.md")
    corpus.write_bytes(b"".join((REPO / "docs" / name).read_bytes()[:400] + b"\0" for name in names))

    def run(packing: PackingConfig):
        config = TrainerConfig(
            model=MODEL,
            sequence_length=2048,
            global_batch_tokens=4096,
            steps=2,
            precision="fp32",
            parallelism=ParallelConfig(data=2, context=2),
            data=DataConfig(kind="text", path=str(corpus), packing=packing),
            optimizer=OptimizerConfig(warmup_steps=0),
        )
        events = []
        mesh = make_mesh(config.parallelism, jax.devices()[:4])
        train(config, mesh, emit=events.append, metrics=TrainMetrics("t", 0), peak_flops_per_device=1e12)
        return [e for e in events if e["event"] == "step"], Batches(config, mesh)

    plain, _ = run(PackingConfig())
    masked, batches = run(PackingConfig(document_mask=True))
    assert batches.separator == SEPARATOR
    # Measured 2026-11-26: 2.7e-3 and 3.5e-3 apart (each run is deterministic to the bit).
    assert all(abs(p["loss"] - m["loss"]) > 1e-3 for p, m in zip(plain, masked, strict=True))
    # Same step time would give a lower MFU: documents of 400 bytes in 512-token windows need
    # far less attention than the causal T^2 / 2.
    per_second = [m["mfu"] / m["tokens_per_second"] for m in (plain[0], masked[0])]
    assert per_second[1] < per_second[0]


def test_text_directory_ends_each_file_with_the_separator(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one")
    (tmp_path / "b.txt").write_bytes(b"two")
    np.testing.assert_array_equal(text_bytes(tmp_path, SEPARATOR), list(b"one\0two\0"))
    np.testing.assert_array_equal(text_bytes(tmp_path), list(b"onetwo"))


def test_token_file_separator_comes_from_the_tokenizers_record(tmp_path):
    path = tmp_path / "corpus.bin"
    data = DataConfig(kind="tokens", path=str(path), packing=PackingConfig(document_mask=True))
    with pytest.raises(ValueError, match="packing.separator"):
        document_separator(data)
    (tmp_path / "corpus.bin.json").write_text('{"end_of_text": 128001}')
    assert document_separator(data) == 128001
    explicit = DataConfig(kind="tokens", path=str(path), packing=PackingConfig(document_mask=True, separator=2))
    assert document_separator(explicit) == 2


def test_synthetic_packing_needs_a_separator():
    with pytest.raises(ValueError, match="packing.separator"):
        DataConfig(packing=PackingConfig(document_mask=True))
