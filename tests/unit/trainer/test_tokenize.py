"""`longctx tokenize`: text files -> the token file `data.kind: tokens` reads (trainer/tokenize.py).

The tokenizer is a small BPE trained here with the `tokenizers` library and saved as the
tokenizer.json a Hugging Face checkpoint carries.
"""

import json
import subprocess
import sys

import numpy as np
import pytest

from longctx_trainer.contract.config import DataConfig, PackingConfig, token_file_record
from longctx_trainer.contract.sources import document_separator, token_file
from longctx_trainer.tokenize import tokenize_files
from support.manifests import ROOT

TEXT = ["The quick brown fox jumps over the lazy dog.\n" * 40, "Long context needs long documents.\n" * 30]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>"]))
    directory = tmp_path_factory.mktemp("checkpoint")
    tokenizer.save(str(directory / "tokenizer.json"))
    return directory


def _corpus(tmp_path):
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    (corpus / "a.txt").write_text(TEXT[0])
    (corpus / "sub" / "b.txt").write_text(TEXT[1])
    return corpus


def test_documents_are_encoded_in_order_each_ending_with_end_of_text(tmp_path, tokenizer_dir):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos = tokenizer.token_to_id("</s>")
    written = tokenize_files(tokenizer_dir, [_corpus(tmp_path)], tmp_path / "tokens.bin")
    expected = [*tokenizer.encode(TEXT[0]).ids, eos, *tokenizer.encode(TEXT[1]).ids, eos]
    assert (written.documents, written.tokens, written.dtype) == (2, len(expected), "uint16")
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    np.testing.assert_array_equal(token_file(tmp_path / "tokens.bin", vocab), expected)
    # The record beside it names the separator `data.packing` splits documents at.
    data = DataConfig(kind="tokens", path=str(tmp_path / "tokens.bin"), packing=PackingConfig(document_mask=True))
    assert document_separator(data) == eos
    # ... and a sample of the documents' lengths (end-of-text included) for `longctx plan`.
    lengths = sorted([len(tokenizer.encode(TEXT[0]).ids) + 1, len(tokenizer.encode(TEXT[1]).ids) + 1])
    assert written.document_lengths == lengths
    assert json.loads(token_file_record(tmp_path / "tokens.bin").read_text())["document_lengths"] == lengths


def test_the_width_follows_the_models_vocabulary_and_blocks_split_at_lines(tmp_path, tokenizer_dir, monkeypatch):
    import longctx_trainer.tokenize as tokenize

    monkeypatch.setattr(tokenize, "BLOCK_BYTES", 100)  # many blocks, each ending at a line end
    corpus = _corpus(tmp_path)
    small = tokenize_files(tokenizer_dir, [corpus], tmp_path / "small.bin")
    wide = tokenize_files(tokenizer_dir / "tokenizer.json", [corpus], tmp_path / "wide.bin", vocab=128256)
    assert (small.dtype, wide.dtype, wide.tokens) == ("uint16", "uint32", small.tokens)
    np.testing.assert_array_equal(token_file(tmp_path / "wide.bin", 128256), token_file(tmp_path / "small.bin", 300))


@pytest.mark.parametrize(
    "extra,needle",
    [
        (["--vocab", "10"], "outside the vocabulary of 10"),
        (["--end-of-text", "<eot>"], "no end-of-text token '<eot>'"),
        (["--tokenizer", "NOWHERE"], "no such tokenizer file"),
    ],
)
def test_bad_input_is_one_line(tmp_path, tokenizer_dir, extra, needle):
    argv = ["tokenize", str(_corpus(tmp_path)), "--tokenizer", str(tokenizer_dir), "-o", str(tmp_path / "t.bin")]
    argv += [str(tmp_path / "nowhere") if a == "NOWHERE" else a for a in extra]
    proc = subprocess.run(
        [sys.executable, "-m", "longctx_operator.cli", *argv], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("longctx: ") and needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus"]  # nothing half-written left


def test_cli_reports_what_it_wrote(tmp_path, tokenizer_dir):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "longctx_operator.cli",
            "tokenize",
            str(_corpus(tmp_path)),
            "--tokenizer",
            str(tokenizer_dir),
            "-o",
            str(tmp_path / "t.bin"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("longctx: 2 documents, ") and "(uint16)" in proc.stdout
    assert (
        "jax"
        not in subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys, longctx_operator.cli, longctx_trainer.tokenize; "
                "print(' '.join(m for m in sys.modules if m.startswith('jax')))",
            ],
            capture_output=True,
            text=True,
        ).stdout
    )


def test_vocab_comes_from_the_checkpoint_and_the_output_is_never_an_input(tmp_path, tokenizer_dir):

    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    (checkpoint / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
    (checkpoint / "config.json").write_text(json.dumps({"vocab_size": 128256}))
    corpus = _corpus(tmp_path)
    (corpus / "model.pyc").write_bytes(b"\x00\x01binary")  # skipped, as the text loader does
    output = corpus / "tokens.bin"  # inside the corpus: neither it nor its .partial is read
    output.write_bytes(b"old tokens")
    written = tokenize_files(checkpoint, [corpus], output)
    assert (written.documents, written.dtype) == (2, "uint32")
    again = tokenize_files(checkpoint, [corpus], output)
    assert again == written


def test_a_tokenizer_without_a_known_end_of_text_token_must_name_one(tmp_path):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from longctx_trainer.tokenize import TokenizeError

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.train_from_iterator(TEXT, trainers.BpeTrainer(vocab_size=280, special_tokens=["<sep>"]))
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    corpus = _corpus(tmp_path)
    with pytest.raises(TokenizeError, match="name its document separator with --end-of-text"):
        tokenize_files(tmp_path / "tokenizer.json", [corpus], tmp_path / "t.bin")
    written = tokenize_files(tmp_path / "tokenizer.json", [corpus], tmp_path / "t.bin", end_of_text="<sep>")
    assert written.documents == 2


def test_the_cli_needs_no_numpy_the_operator_image_has_none():
    """The operator image installs longctx without numpy: every command must still start."""
    script = (
        "import sys; sys.modules['numpy'] = None; from longctx_operator.cli import main; "
        "sys.exit(main(['validate', 'examples/quickstart.yaml']))"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "valid" in proc.stdout, proc.stderr
