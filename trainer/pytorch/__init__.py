"""The PyTorch example trainer: a Llama-style model with context-parallel ring attention over
torch.distributed (gloo on CPU, NCCL on GPUs), run as `python -m longctx_trainer.pytorch`.

It imports torch and never JAX (tests/unit/test_import_boundary.py); it needs the `torch` extra.
"""
