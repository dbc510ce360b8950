import os

from hypothesis import HealthCheck, settings

# Eight CPU devices for the trainer's multi-device tests; must be set before JAX is imported.
# The unit tier compiles hundreds of small programs, where LLVM's optimisation of the CPU code is
# about half of all the tier's CPU time and none of what it checks: XLA's own passes (fusion,
# sharding, the HLO that tests/support/hlo.py reads) still run, only the machine code is less tuned.
UNIT_XLA_FLAGS = (
    "--xla_force_host_platform_device_count=8",
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
)
os.environ["XLA_FLAGS"] = " ".join((os.environ.get("XLA_FLAGS", ""), *UNIT_XLA_FLAGS)).strip()

# Property tests check what is rendered or parsed, never how fast: no per-example deadline and no
# slow-generation check (a loaded 2-core CI machine took 358 ms for one example, against
# Hypothesis's default 200 ms deadline; benchmarks/ measure speed).
settings.register_profile("longctx", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("longctx")
