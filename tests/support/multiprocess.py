"""The JAX trainer run as two or four processes on the host's CPU (tests/integration's
multi-process runs): their shared training config and the progress events a process printed."""

from __future__ import annotations

from pathlib import Path

from longctx_operator.localrun import parse_event

TWO_BY_TWO = {
    "model": {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 64, "vocab": 128},
    "sequence_length": 32,
    "global_batch_tokens": 128,
    "steps": 3,
    "precision": "fp32",
    "parallelism": {"data": 2, "context": 2, "tensor": 1},
    "optimizer": {"learning_rate": 0.01, "warmup_steps": 1},
    "data": {"kind": "synthetic", "seed": 3},
    "metrics": {"port": 0},
}
"""A small fp32 model over data 2 x context 2, three steps: change what a test is about."""


def progress_events(out: Path) -> list[dict]:
    """The events in a process's stdout file (none while it does not exist)."""
    return [e for e in map(parse_event, out.read_text().splitlines()) if e is not None] if out.exists() else []
