import os

# Eight CPU devices for the trainer's multi-device tests; must be set before JAX is imported.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
