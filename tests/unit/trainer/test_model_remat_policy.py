"""trainer/model.py's remat policies: "save_attention" keeps attention's output and residuals, so
the backward never reruns the attention forward (the ring), with the numerics of no remat.

The lowering checks read the whole training step on a CPU mesh: lowered for CUDA (`jax.export`,
the cuDNN calls need no GPU to lower) for the fused forward calls and collective-permutes, and
compiled for the CPU for its collective-permutes. Full remat has the ring forward twice."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export

from longctx_trainer import model
from longctx_trainer.contract.config import DataConfig, ModelConfig, ParallelConfig, TrainerConfig
from longctx_trainer.mesh import make_mesh
from longctx_trainer.ops import attention, cudnn_compat
from longctx_trainer.train import StepFunctions
from support.tiny import TINY_SEQUENCE
from support.tiny_model import loss_and_grads, model_options

BATCH = 2
TARGETS = (cudnn_compat.FORWARD_TARGET, cudnn_compat.BACKWARD_TARGET)
WAIVED = [export.DisabledSafetyCheck.custom_call(t) for t in TARGETS]


def _options(**changes) -> model.ModelOptions:
    return model_options(**{"remat": True, **changes})


def _loss_and_grads(parallel: ParallelConfig, options: model.ModelOptions):
    loss, grads, _ = loss_and_grads(parallel, options, batch=BATCH, seq=TINY_SEQUENCE)
    return loss, grads


@pytest.fixture(scope="module")
def reference():
    """One device, no remat: the plain program's loss and gradients."""
    return _loss_and_grads(ParallelConfig(), _options(remat=False))


def test_saved_attention_matches_no_remat_forward_and_gradients(reference):
    """Data 2 x context 4 (the ring, dual-chunk-swap) under policy save_attention."""
    loss, grads = _loss_and_grads(ParallelConfig(data=2, context=4), _options(remat_policy="save_attention"))
    np.testing.assert_allclose(loss, reference[0], rtol=1e-6)
    expected = dict(jax.tree.flatten_with_path(reference[1])[0])
    for path, g in jax.tree.flatten_with_path(grads)[0]:
        np.testing.assert_allclose(g, expected[path], rtol=1e-5, atol=1e-7, err_msg=jax.tree_util.keystr(path))


def test_the_numerics_check_fails_when_the_saved_residuals_are_wrong(reference, monkeypatch):
    """Mutant: the residuals the backward reads are not the forward's (the log-sum-exp off by
    0.1): the forward is unchanged, the gradients are not."""

    def off(residuals, name):
        (q, k, v, out, lse), segments = residuals
        return (q, k, v, out, lse + 0.1), segments

    monkeypatch.setattr(attention, "checkpoint_name", off)
    with pytest.raises(AssertionError):
        test_saved_attention_matches_no_remat_forward_and_gradients(reference)


def _step_programs(policy: str, compile_cpu: bool) -> tuple[str, str]:
    """(StableHLO lowered for CUDA, HLO compiled for the CPU or "") of a training step, context 4,
    one layer."""
    config = TrainerConfig(
        model=ModelConfig(layers=1, hidden=80, heads=2, kv_heads=1, ffn=96, vocab=200),
        sequence_length=256,
        global_batch_tokens=256,
        steps=1,
        parallelism=ParallelConfig(context=4),
        data=DataConfig(kind="synthetic"),
        remat_policy=policy,
    )
    fns = StepFunctions(config, make_mesh(config.parallelism, jax.devices()[:4]))
    tokens = jax.ShapeDtypeStruct((config.batch_size, config.sequence_length), jnp.int32)
    args = (fns.abstract_state(), tokens, tokens, None)
    cuda = export.export(fns.step, platforms=["cuda"], disabled_checks=WAIVED)(*args).mlir_module()
    cpu = jax.jit(fns.step).lower(*args).compile().as_text() if compile_cpu else ""
    return cuda, cpu


def _counts(policy: str, compile_cpu: bool = True) -> tuple[int, int, int, int]:
    """(fused forward calls, fused backward calls, collective-permutes) lowered for CUDA, and
    collective-permutes compiled for the CPU (0 without `compile_cpu`)."""
    cuda, cpu = _step_programs(policy, compile_cpu)
    forward, backward = (cuda.count(f"stablehlo.custom_call @{t}(") for t in TARGETS)
    return forward, backward, cuda.count("stablehlo.collective_permute"), cpu.count(" collective-permute(")


@pytest.fixture(scope="module")
def full_counts():
    return _counts("full")


def test_full_remat_runs_the_ring_forward_twice(full_counts):
    """The forward pass and its rematerialisation: 5 fused calls each (step 0, the loop body's
    two branches, the last step's two), K and V rotated by both (2 + 2 each)."""
    assert full_counts[:3] == (2 * 5, 5, 2 * 4 + 10)


def test_saved_attention_runs_the_ring_forward_once(full_counts, compile_cpu=True):
    """save_attention: the forward's fused calls and K/V permutes once; the backward unchanged;
    the compiled CPU program has fewer collective-permutes than full remat's."""
    forward, backward, permutes, cpu_permutes = _counts("save_attention", compile_cpu)
    assert (forward, backward, permutes) == (5, 5, 4 + 10)
    assert cpu_permutes < full_counts[3] or not compile_cpu


def test_the_lowering_check_fails_when_the_residuals_are_not_named(full_counts, monkeypatch):
    """Mutant: attention's residuals unnamed, so the policy cannot keep them and the backward
    reruns the ring forward."""
    monkeypatch.setattr(attention, "checkpoint_name", lambda residuals, name: residuals)
    with pytest.raises(AssertionError):
        test_saved_attention_runs_the_ring_forward_once(full_counts, compile_cpu=False)
