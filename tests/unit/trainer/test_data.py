"""Data sources and the sharded global batch."""

import jax
import numpy as np
import pytest

from longctx_trainer.contract.config import DataConfig, ModelConfig, ParallelConfig, TrainerConfig
from longctx_trainer.contract.sources import CorpusWindows, make_source, text_bytes, token_file
from longctx_trainer.data import Batches
from longctx_trainer.mesh import make_mesh


def _config(data_config: DataConfig, vocab: int = 256, **parallel) -> TrainerConfig:
    return TrainerConfig(
        model=ModelConfig(layers=1, hidden=16, heads=2, kv_heads=2, ffn=32, vocab=vocab),
        sequence_length=16,
        global_batch_tokens=64,
        steps=1,
        precision="fp32",
        parallelism=ParallelConfig(**parallel),
        data=data_config,
    )


def test_synthetic_samples_are_seeded_and_in_vocab():
    a = make_source(DataConfig(kind="synthetic", seed=3), vocab=50, sequence_length=16)
    b = make_source(DataConfig(kind="synthetic", seed=3), vocab=50, sequence_length=16)
    c = make_source(DataConfig(kind="synthetic", seed=4), vocab=50, sequence_length=16)
    assert a.sample(7).shape == (17,)
    np.testing.assert_array_equal(a.sample(7), b.sample(7))
    assert not np.array_equal(a.sample(7), c.sample(7))
    assert not np.array_equal(a.sample(7), a.sample(8))
    assert a.sample(7).min() >= 0 and a.sample(7).max() < 50


@pytest.mark.parametrize("vocab,dtype", [(1000, np.uint16), (100_000, np.uint32)])
def test_token_file_is_memory_mapped_with_vocab_sized_ids(tmp_path, vocab, dtype):
    ids = np.arange(200, dtype=dtype) * (vocab // 200)
    ids.tofile(tmp_path / "corpus.bin")
    stream = token_file(tmp_path / "corpus.bin", vocab)
    assert isinstance(stream, np.memmap) and stream.dtype == dtype
    np.testing.assert_array_equal(stream, ids)


def test_corpus_windows_cover_every_window_once_per_epoch():
    stream = np.arange(1 + 10 * 8)  # exactly 10 windows of 8 (+1 overlapping target)
    windows = CorpusWindows(stream, sequence_length=8, seed=0)
    starts = sorted(int(windows.sample(i)[0]) for i in range(10))
    assert starts == list(range(0, 80, 8))
    first = windows.sample(0)
    np.testing.assert_array_equal(first, np.arange(first[0], first[0] + 9))
    second_epoch = [int(windows.sample(i)[0]) for i in range(10, 20)]
    assert sorted(second_epoch) == starts and second_epoch != [int(windows.sample(i)[0]) for i in range(10)]


def test_text_is_byte_level_from_file_or_directory_skipping_binaries(tmp_path):
    (tmp_path / "a.txt").write_text("héllo")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.txt").write_bytes(b"xyz\n")
    (tmp_path / "sub" / "c.pyc").write_bytes(b"\x00\x01binary")
    np.testing.assert_array_equal(text_bytes(tmp_path / "a.txt"), list("héllo".encode()))
    np.testing.assert_array_equal(text_bytes(tmp_path), list("héllo".encode() + b"xyz\n"))
    with pytest.raises(ValueError, match="at least 256"):
        make_source(DataConfig(kind="text", path=str(tmp_path)), vocab=100, sequence_length=4)


def test_global_batch_is_sharded_and_targets_are_shifted_inputs(tmp_path):
    (tmp_path / "t.txt").write_bytes(bytes(range(256)) * 4)
    config = _config(DataConfig(kind="text", path=str(tmp_path / "t.txt"), seed=1), data=2, context=2, tensor=2)
    mesh = make_mesh(config.parallelism)
    batches = Batches(config, mesh)
    inputs, targets, documents = batches.for_step(3)
    assert documents is None  # no data.packing
    assert inputs.sharding.spec == jax.sharding.PartitionSpec("data", "context")
    assert inputs.addressable_shards[0].data.shape == (2, 8)  # 4 rows / data 2, 16 cols / context 2
    windows = np.stack([batches.source.sample(3 * 4 + r) for r in range(4)])
    np.testing.assert_array_equal(np.asarray(inputs), windows[:, :-1])
    np.testing.assert_array_equal(np.asarray(targets), windows[:, 1:])
    assert batches.position(3) == 12


def test_a_shard_reads_only_its_own_rows():
    class Recording:
        def __init__(self):
            self.read = []

        def sample(self, index):
            self.read.append(index)
            return np.arange(17, dtype=np.int32) + 100 * index

    config = _config(DataConfig(), data=2)
    source = Recording()
    batches = Batches(config, make_mesh(config.parallelism, jax.devices()[:2]), source)
    # Rows 2..3 of step 1 (the second data rank), second half of the sequence, targets.
    piece = batches.piece(1, (slice(2, 4), slice(8, 16)), "targets", {})
    assert source.read == [6, 7]
    np.testing.assert_array_equal(piece, [np.arange(9, 17) + 600, np.arange(9, 17) + 700])


def test_windows_are_as_docs_trainer_md_describes():
    """docs/trainer.md: windows of sequence_length + 1 starting every sequence_length tokens, so
    neighbours share one token and every token but the first is a target exactly once."""
    from pathlib import Path

    import numpy as np

    from longctx_trainer.contract.sources import CorpusWindows

    doc = (Path(__file__).resolve().parents[3] / "docs" / "trainer.md").read_text()
    assert "windows of `sequence_length + 1` tokens" in doc and "start every `sequence_length` tokens" in doc
    stream = np.arange(1 + 4 * 8)
    windows = CorpusWindows(stream, sequence_length=8, seed=0)
    samples = sorted((windows.sample(i) for i in range(windows.count)), key=lambda w: w[0])
    assert all(len(w) == 9 for w in samples)
    assert [w[0] for w in samples] == [0, 8, 16, 24]
    targets = np.concatenate([w[1:] for w in samples])
    assert sorted(targets.tolist()) == list(range(1, 33))
