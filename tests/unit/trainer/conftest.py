"""The trainer's unit tests load what XLA compiled in an earlier run of them on this machine.

Compiling is most of these tests' CPU time (measured in docs/cluster.md, "Real nodes"), and a
program's compiled form depends only on what the cache key holds: its HLO, the compile options and
flags (conftest.py's `UNIT_XLA_FLAGS`), the devices and the JAX and XLA versions. So the tests
still trace, lower and run every program; only XLA's compilation of a program it compiled before
is skipped. The cache is this process's alone to configure: a trainer the tests start in a
subprocess keeps its own (trainer/compile_cache.py). Entries live under the build cache, per JAX
version, at most `MAX_BYTES` (least recently used evicted first, under JAX's file lock).
"""

import jax

from support.cache import cache_root

MAX_BYTES = 2**30

jax.config.update("jax_compilation_cache_dir", str(cache_root() / f"jax-unit-tests-{jax.__version__}"))
jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
# Every program, however quickly it compiles: reading an entry is cheaper than compiling the smallest.
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
