"""longctx trainer: JAX long-context training (ring attention, tensor parallelism, offload)."""
