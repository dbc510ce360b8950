"""The PyTorch example trainer: a Llama-style model with context-parallel ring attention over
torch.distributed's gloo backend, on CPU only, run as `python -m longctx_trainer.pytorch`.

It imports torch and never JAX (tests/unit/test_import_boundary.py); it needs the `torch` extra.
"""
