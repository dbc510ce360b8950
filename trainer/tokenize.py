"""Text files -> one token file for `data.kind: tokens`, with a Hugging Face tokenizer.

Offline data preparation (`longctx tokenize`, or `python -m longctx_trainer.tokenize`): every input
file is one document, encoded with the tokenizer.json of the model being trained (the one in its
Hugging Face checkpoint directory) and followed by the end-of-text token, and the ids are appended
to a flat .bin file in the width `sources.token_file` reads for the model's vocabulary (uint16 up to
65,536 ids, else uint32). Beside it, <output>.json records the end-of-text id (which `data.packing`
splits documents at), the vocabulary, the documents, the tokens and a sample of the documents'
lengths (`contract.adaptive.length_sample`, also printed: `data.packing.documentLengths`, with which
`longctx plan` models adaptive context parallelism). Large files are encoded in
blocks of whole lines, so memory stays bounded. Imports no JAX, and numpy only when it runs: the
operator's CLI, whose image has no numpy, declares these arguments from here.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import hfconfig
from .contract.adaptive import length_sample
from .contract.config import token_file_record

# End-of-document tokens of common tokenizers: Llama 3, Llama 2 / Mistral, GPT-2 style.
END_OF_TEXT = ("<|end_of_text|>", "</s>", "<|endoftext|>")
BLOCK_BYTES = 1 << 22


class TokenizeError(ValueError):
    pass


@dataclass(frozen=True)
class Written:
    documents: int
    tokens: int
    dtype: str
    document_lengths: list[int]  # `length_sample` of the documents' lengths (end-of-text included)


def load_tokenizer(path: str | Path):
    """A tokenizers.Tokenizer from a tokenizer.json, or from a directory holding one."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise TokenizeError("the tokenizers package is missing: pip install 'longctx[tokenize]'") from None
    path = Path(path)
    file = path / "tokenizer.json" if path.is_dir() else path
    if not file.is_file():
        raise TokenizeError(f"{file}: no such tokenizer file")
    try:
        return Tokenizer.from_file(str(file))
    except Exception as e:  # the library raises its own exception type for malformed files
        raise TokenizeError(f"{file}: not a tokenizers JSON file: {e}") from None


def _blocks(path: Path) -> Iterator[str]:
    """The file's text in blocks of whole lines of about BLOCK_BYTES (a line longer than that is
    cut, so memory stays bounded)."""
    with path.open("r", encoding="utf-8", errors="replace", newline="") as f:
        while block := f.read(BLOCK_BYTES):
            block += f.readline(BLOCK_BYTES)  # finish the line the block cut
            yield block


def _is_text(path: Path) -> bool:
    with path.open("rb") as f:
        return b"\x00" not in f.read(8192)


def _text_files(inputs: list[Path], skip: set[Path]) -> list[Path]:
    """Files given and files under directories given (sorted), without binary files and `skip`."""
    files = []
    for path in inputs:
        if path.is_dir():
            files += [p for p in sorted(path.rglob("*")) if p.is_file() and _is_text(p)]
        elif path.is_file():
            files.append(path)
        else:
            raise TokenizeError(f"{path}: no such file or directory")
    files = [f for f in files if f.resolve() not in skip]
    if not files:
        raise TokenizeError("no input text files")
    return files


def _model_vocab(tokenizer_path: Path) -> int | None:
    """vocab_size of the checkpoint's config.json next to its tokenizer, if there is one."""
    try:
        return hfconfig.vocab(hfconfig.read(tokenizer_path if tokenizer_path.is_dir() else tokenizer_path.parent))
    except hfconfig.HfConfigError:
        return None


def tokenize_files(
    tokenizer_path: str | Path,
    inputs: list[Path],
    output: Path,
    *,
    vocab: int | None = None,
    end_of_text: str | None = None,
) -> Written:
    """`vocab` (the model's, which sets the width the trainer reads) defaults to the checkpoint's
    config.json beside the tokenizer, else to the tokenizer's own size."""
    try:
        import numpy as np
    except ImportError:
        raise TokenizeError("numpy is missing: pip install 'longctx[tokenize]'") from None
    tokenizer_path = Path(tokenizer_path)
    tokenizer = load_tokenizer(tokenizer_path)
    vocab = vocab or _model_vocab(tokenizer_path) or tokenizer.get_vocab_size(with_added_tokens=True)
    names = (end_of_text,) if end_of_text else END_OF_TEXT
    eos = next((i for i in map(tokenizer.token_to_id, names) if i is not None), None)
    if eos is None:
        raise TokenizeError(
            f"the tokenizer has no end-of-text token {' or '.join(map(repr, names))}; "
            "name its document separator with --end-of-text"
        )
    if eos >= vocab:
        raise TokenizeError(f"the end-of-text token's id {eos} is outside the vocabulary of {vocab}")
    dtype = np.uint16 if vocab <= 1 << 16 else np.uint32
    partial = output.with_name(output.name + ".partial")  # an existing output survives a failure
    files = _text_files(inputs, skip={output.resolve(), partial.resolve(), token_file_record(output).resolve()})
    tokens = 0
    lengths = []
    try:
        with partial.open("wb") as out:
            for file in files:
                before = tokens
                for block in _blocks(file):
                    ids = np.asarray(tokenizer.encode(block, add_special_tokens=False).ids, dtype=np.int64)
                    if ids.size and ids.max() >= vocab:
                        raise TokenizeError(f"{file}: token id {ids.max()} is outside the vocabulary of {vocab}")
                    ids.astype(dtype).tofile(out)
                    tokens += ids.size
                np.asarray([eos], dtype).tofile(out)
                tokens += 1
                lengths.append(tokens - before)
        partial.replace(output)
    finally:
        partial.unlink(missing_ok=True)
    written = Written(len(files), tokens, np.dtype(dtype).name, length_sample(lengths))
    record = {
        "end_of_text": eos,
        "vocab": vocab,
        "documents": written.documents,
        "tokens": tokens,
        "dtype": written.dtype,
        "document_lengths": written.document_lengths,
    }
    token_file_record(output).write_text(json.dumps(record, indent=1) + "\n")
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m longctx_trainer.tokenize", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    run(parser.parse_args(argv), prefix="longctx_trainer.tokenize")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", type=Path, help="text files or directories (every file below)")
    parser.add_argument("--tokenizer", required=True, help="tokenizer.json, or a checkpoint directory with one")
    parser.add_argument("--output", "-o", required=True, type=Path, help="the token file to write (.bin)")
    parser.add_argument(
        "--vocab",
        type=int,
        help="the model's vocabulary size (default: vocab_size of the "
        "checkpoint's config.json beside the tokenizer, else the tokenizer's)",
    )
    parser.add_argument(
        "--end-of-text", help=f"document separator token (default: the first of {', '.join(END_OF_TEXT)})"
    )


def run(args: argparse.Namespace, prefix: str) -> None:
    try:
        written = tokenize_files(
            args.tokenizer, args.inputs, args.output, vocab=args.vocab, end_of_text=args.end_of_text
        )
    except (OSError, TokenizeError) as error:
        raise SystemExit(f"{prefix}: {error}") from None
    print(f"{prefix}: {written.documents} documents, {written.tokens:,} tokens ({written.dtype}) -> {args.output}")
    print(f"{prefix}: data.packing.documentLengths (for longctx plan): {json.dumps(written.document_lengths)}")


if __name__ == "__main__":
    main()
