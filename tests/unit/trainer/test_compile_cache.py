"""The persistent compilation cache beside the checkpoints (trainer/compile_cache.py): where it is,
and that a process which compiled before the cache was set (the rendezvous's all-gathers) still
stores its later compilations and a fresh process loads them (real JAX processes)."""

import json
import subprocess
import sys
from pathlib import Path

from longctx_trainer.compile_cache import CACHE_FOLDER, cache_dir
from longctx_trainer.contract.podenv import COMPILATION_CACHE_DIR


def test_the_cache_is_beside_a_local_checkpoint_directory_only(tmp_path):
    assert cache_dir(str(tmp_path / "ckpt"), {}) == tmp_path / "ckpt" / CACHE_FOLDER
    assert cache_dir("relative/ckpt", {}) == Path("relative/ckpt").absolute() / CACHE_FOLDER
    assert cache_dir(None, {}) is None
    assert cache_dir("gs://bucket/run", {}) is None  # JAX's file layer, not ours, would be needed
    assert cache_dir(str(tmp_path), {COMPILATION_CACHE_DIR: "/elsewhere"}) is None  # the user's own choice stands


PROCESS = """
import json, sys
from pathlib import Path
import jax, jax.numpy as jnp
from longctx_trainer import compile_cache

jax.jit(lambda x: x + 1)(jnp.ones(4)).block_until_ready()  # before the cache: as the rendezvous
compile_cache.enable(Path(sys.argv[1]))

@jax.jit
def step(x):
    for _ in range(40):
        x = jnp.tanh(x @ x)
    return x

with compile_cache.counting_hits() as hits:
    step.lower(jnp.ones((32, 32))).compile()
print(json.dumps({"hits": hits()}))
"""


def _compile(cache: Path) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROCESS, str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
        env={"JAX_PLATFORMS": "cpu", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])["hits"]


def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    cache = tmp_path / "ckpt" / CACHE_FOLDER
    assert _compile(cache) == 0
    assert any(cache.iterdir())  # written by the first process
    assert _compile(cache) >= 1
