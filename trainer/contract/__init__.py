"""What the operator and both trainers share, framework-free (no JAX, torch, kopf or kubernetes):
the trainer's config, model presets, the hardware catalogue, the pod environment, FLOPs per token,
the load-balance layouts, the metric names and exporter, the learning-rate schedule, the token
sources."""
