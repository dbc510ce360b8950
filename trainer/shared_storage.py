"""Whether every process of the job sees the same checkpoint directory.

A checkpoint of several processes is written by all of them into one directory, and orbax's
primary process finishes it only once it sees every process's part. A local path that is not
shared storage (each pod's own disk: the job mounts no ReadWriteMany claim there) gives every
process a directory of its own, and the first save waits forever: the gang hangs in phase
`checkpointing` until the operator's hang detection restarts it, to hang again at the same step.
So before training, every process writes a marker named by a token all of them share into the
directory, and each looks for the others' markers; they agree on the answer with one all-gather.
Object-store URLs (gs://, s3://) are shared by definition and are not checked.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
from jax.experimental import multihost_utils

from .contract.config import is_url


def _marker(directory: Path, token: int, process: int) -> Path:
    return directory / f".longctx-shared-{token:016x}-{process}"


def sees_every_marker(directory: Path, token: int, processes: int) -> bool:
    """True when `directory` holds the markers of all `processes` for `token`."""
    return all(_marker(directory, token, p).exists() for p in range(processes))


def shared_by_all_processes(path: str, process: int, processes: int) -> bool:
    """True when every one of the job's `processes` sees the same directory at `path` (a
    collective: every process calls it, at the same point). Creates the directory if missing."""
    if processes == 1 or is_url(path):
        return True
    directory = Path(path).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    token = int(multihost_utils.broadcast_one_to_all(np.int64(secrets.randbits(62))))
    marker = _marker(directory, token, process)
    marker.touch()
    multihost_utils.sync_global_devices("longctx: checkpoint markers written")
    seen = sees_every_marker(directory, token, processes)
    agreed = bool(np.all(multihost_utils.process_allgather(np.array([seen]))))
    marker.unlink()
    return agreed
