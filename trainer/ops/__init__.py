"""Attention ops: fp32 reference, block kernel, ring, all-gather and Ulysses context parallelism,
load-balancing layouts and FPDT-style chunking/offload."""

from ..contract.load_balance import inverse_permutation, permutation
from .attention import context_parallel_attention
from .reference import reference_attention

__all__ = ["context_parallel_attention", "inverse_permutation", "permutation", "reference_attention"]
