"""Which attention kernel runs is reported, never a silent fallback (trainer/ops/block.py)."""

import jax
import jax.numpy as jnp
import pytest

from longctx_trainer.ops.block import attention_kernel


def test_cpu_runs_the_pure_jax_kernel_and_says_why():
    assert jax.default_backend() == "cpu"
    kernel, why = attention_kernel(jnp.bfloat16, 128)
    assert kernel == "jax" and "cuDNN needs a GPU" in why


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="the cuDNN kernel exists only on a GPU")
def test_gpu_runs_cudnn_for_bf16_and_falls_back_with_a_reason():
    assert attention_kernel(jnp.bfloat16, 128) == ("cudnn", "bf16/fp16 on GPU with a supported head size")
    kernel, why = attention_kernel(jnp.float32, 128)
    assert kernel == "jax" and "float32" in why
    kernel, why = attention_kernel(jnp.bfloat16, 160)
    assert kernel == "jax" and "head size 160" in why
