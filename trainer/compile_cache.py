"""JAX's persistent compilation cache beside the checkpoints, so that a gang that starts again (a
new generation after a failure, a preempted pod replaced, a Kueue readmission, a `longctx run`
resumed) loads its training step's executable instead of compiling it again: compiling is the
longest stage of a recovery after the pods' start (docs/operator.md, the recovery tables).

JAX writes entries only from process 0 and every process looks them up (on XLA:CPU only process 0
finds them: JAX's key holds the CPU topology's fingerprint, which differs per process; see
docs/trainer.md), so the cache must be one directory that all processes share: the checkpoint
directory is one (`shared_storage.py` checks it). An object-store checkpoint path gets no cache
here (JAX would need its own file-system layer for it); `JAX_COMPILATION_CACHE_DIR` in the pod's
env, the user's choice, always wins.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import jax

from .contract.config import is_url
from .contract.podenv import COMPILATION_CACHE_DIR

CACHE_FOLDER = "compile-cache"
"""The cache's folder inside the checkpoint directory (orbax reads only step-numbered folders)."""
HIT_EVENT = "/jax/compilation_cache/cache_hits"
"""The jax.monitoring event JAX records for each executable loaded from the persistent cache."""


def cache_dir(checkpoint_path: str | None, environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where this process's compiled steps are cached: beside a local, shared checkpoint directory
    (None when there is none, when it is an object-store URL, or when the env names one itself)."""
    if environ.get(COMPILATION_CACHE_DIR) or not checkpoint_path or is_url(checkpoint_path):
        return None
    return Path(checkpoint_path).absolute() / CACHE_FOLDER


def enable(directory: Path) -> None:
    """Every compilation from now on is looked up in `directory`, and process 0 stores it there
    (what compiled before, the rendezvous's all-gathers, stays uncached)."""
    jax.config.update("jax_compilation_cache_dir", str(directory))


@contextmanager
def counting_hits() -> Iterator[Callable[[], int]]:
    """The number of executables loaded from the persistent cache while the block runs."""
    hits = 0

    def listen(event: str, **_: object) -> None:
        nonlocal hits
        hits += event == HIT_EVENT

    jax.monitoring.register_event_listener(listen)
    try:
        yield lambda: hits
    finally:
        jax.monitoring.unregister_event_listener(listen)
