"""The causal dual-chunk-swap ring lowered for CUDA on a CPU mesh (`jax.export` with
platforms=["cuda"]): the program a GPU would run calls cuDNN's fused forward and backward once per
ring step (trainer/ops/block_kernel.py, ops/cudnn_compat.py), rotates K/V (and dK/dV) with
collective-permutes, and holds no [T, S] logits tensor; so does the whole training step, in
its layer loop. A JAX upgrade that breaks the fused path
fails here, without a GPU. The cuDNN primitives need no GPU to lower; export's refusal of custom
calls without a compatibility guarantee is waived for their two targets only."""

import functools
import inspect
import re

import jax
import jax.numpy as jnp
import pytest
from jax import export

from longctx_trainer.contract.config import DataConfig, ModelConfig, ParallelConfig, TrainerConfig
from longctx_trainer.mesh import make_mesh as make_trainer_mesh
from longctx_trainer.ops import context_parallel_attention, cudnn_compat
from longctx_trainer.train import StepFunctions
from support.attention import make_mesh

CONTEXT, SEQ, HEADS, KV_HEADS, HEAD_DIM = 4, 256, 4, 2, 40  # 64 tokens a device, 32 a chunk
TOKEN_DIMS = {SEQ // CONTEXT // 2, SEQ // CONTEXT, SEQ}  # head size 40 is none of them
WAIVED = [
    export.DisabledSafetyCheck.custom_call(target)
    for target in (cudnn_compat.FORWARD_TARGET, cudnn_compat.BACKWARD_TARGET)
]


def lowered(platform: str, load_balance: str = "dual_chunk_swap", *, context: int = CONTEXT, impl: str = "ring") -> str:
    """StableHLO of the attention's forward and input gradients (bf16) for `platform`."""
    mesh = make_mesh(1, context, 1)
    attend = functools.partial(context_parallel_attention, mesh=mesh, causal=True, impl=impl, load_balance=load_balance)

    def forward_and_backward(q, k, v, do):
        out, vjp = jax.vjp(attend, q, k, v)
        return out, vjp(do)

    def spec(heads):
        return jax.ShapeDtypeStruct((1, SEQ, heads, HEAD_DIM), jnp.bfloat16)

    waived = [
        export.DisabledSafetyCheck.custom_call(t) for t in (cudnn_compat.FORWARD_TARGET, cudnn_compat.BACKWARD_TARGET)
    ]
    exported = export.export(jax.jit(forward_and_backward), platforms=[platform], disabled_checks=waived)
    return exported(spec(HEADS), spec(KV_HEADS), spec(KV_HEADS), spec(HEADS)).mlir_module()


def calls(text: str, target: str) -> int:
    return text.count(f"stablehlo.custom_call @{target}(")


def logits_tensors(text: str) -> set[str]:
    """Tensor types with two token dimensions: a query block's logits against a key block."""
    found = set()
    for shape in re.findall(r"tensor<((?:\d+x)+)[a-z]\w*>", text):
        dims = [int(d) for d in shape.rstrip("x").split("x")]
        if sum(d in TOKEN_DIMS for d in dims) >= 2:
            found.add(shape)
    return found


@pytest.fixture(scope="module")
def cuda_program():
    return lowered("cuda")


def test_every_ring_step_is_one_fused_call_forward_and_backward(cuda_program):
    """Step 0 (causal, local shard), then per step an earlier- or later-member call (lax.cond: both
    lowered): once before the step loop, twice in its body, twice after it, each way."""
    assert calls(cuda_program, cudnn_compat.FORWARD_TARGET) == 5
    assert calls(cuda_program, cudnn_compat.BACKWARD_TARGET) == 5
    # K and V forward (before step 0 and in the loop); K, V, dK, dV backward (after step 0, in
    # the loop) and dK, dV home at the end.
    assert cuda_program.count("stablehlo.collective_permute") == 2 + 2 + 4 + 4 + 2


def test_no_logits_tensor_is_materialised(cuda_program):
    assert logits_tensors(cuda_program) == set()


def test_the_check_sees_logits_where_the_pure_jax_kernel_runs():
    """The same ring lowered for CPU (the JAX kernel) has them; so has a CUDA ring in a layout
    that needs masked chunk pairs (striped: the general path, cuDNN forward for unmasked pairs only)."""
    assert logits_tensors(lowered("cpu"))
    striped = lowered("cuda", load_balance="striped")
    assert logits_tensors(striped) and calls(striped, cudnn_compat.BACKWARD_TARGET) == 0


@pytest.mark.parametrize(
    ("context", "impl", "load_balance"), [(1, "ring", "dual_chunk_swap"), (CONTEXT, "ulysses", "none")]
)
def test_attention_over_all_tokens_in_their_order_is_one_fused_call_each_way(context, impl, load_balance):
    """At context 1 (any layout is the identity there) and inside Ulysses with an unpermuted layout,
    a device attends all the tokens' queries to all their keys: one causal cuDNN call forward and
    one backward, no chunk pairs, no logits."""
    program = lowered("cuda", load_balance, context=context, impl=impl)
    assert (calls(program, cudnn_compat.FORWARD_TARGET), calls(program, cudnn_compat.BACKWARD_TARGET)) == (1, 1)
    assert logits_tensors(program) == set()


def test_ulysses_over_a_permuted_layout_keeps_the_chunked_kernel():
    """Dual-chunk-swap tokens gathered by Ulysses are not in causal order by index: chunk pairs with
    masks, so logits (the limit the test above does not cover)."""
    assert logits_tensors(lowered("cuda", "dual_chunk_swap", impl="ulysses"))


def test_an_unknown_primitive_parameter_is_a_clear_error(monkeypatch):
    """A JAX whose primitive takes a parameter ops/cudnn_compat.py does not know (its CUDA lowering
    rule names every parameter) fails at trace time, naming it."""
    fa = cudnn_compat._fa
    correct = fa._dot_product_attention_fwd_cuda_lowering
    signature = inspect.signature(correct)
    window = inspect.Parameter("window_left", inspect.Parameter.KEYWORD_ONLY, default=0)

    def newer(*operands, window_left=0, **params):
        return correct(*operands, **params)

    newer.__signature__ = signature.replace(parameters=[*signature.parameters.values(), window])
    monkeypatch.setattr(fa, "_dot_product_attention_fwd_cuda_lowering", newer)
    q = jnp.zeros((1, 8, 2, 16), jnp.bfloat16)
    with pytest.raises(NotImplementedError, match="window_left"):
        jax.eval_shape(functools.partial(cudnn_compat.flash_forward, scale=1.0, causal=False), q, q, q)


@pytest.mark.parametrize("layers", [1, 2])
def test_the_training_step_runs_the_fused_ring_in_every_layer(layers):
    """The whole bf16 training step (context 4, remat on) lowered for CUDA: the layer loop's body
    holds the ring's fused calls (forward twice: the forward pass and its rematerialisation in the
    backward), the same counts for 1 and 2 layers, and no logits tensor anywhere."""
    config = TrainerConfig(
        model=ModelConfig(layers=layers, hidden=80, heads=2, kv_heads=1, ffn=96, vocab=200),  # head size 40
        sequence_length=SEQ,
        global_batch_tokens=SEQ,
        steps=1,
        precision="bf16",
        parallelism=ParallelConfig(context=CONTEXT),
        data=DataConfig(kind="synthetic"),
    )
    fns = StepFunctions(config, make_trainer_mesh(config.parallelism, jax.devices()[:CONTEXT]))
    tokens = jax.ShapeDtypeStruct((config.batch_size, config.sequence_length), jnp.int32)
    program = (
        export.export(fns.step, platforms=["cuda"], disabled_checks=WAIVED)(fns.abstract_state(), tokens, tokens, None)
    ).mlir_module()
    assert calls(program, cudnn_compat.FORWARD_TARGET) == 2 * 5
    assert calls(program, cudnn_compat.BACKWARD_TARGET) == 5
    assert program.count("stablehlo.collective_permute") == 2 * 4 + 10
    assert logits_tensors(program) == set()
