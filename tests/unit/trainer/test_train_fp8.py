"""precision fp8 in the model and the training loop: the layer matmuls run in FP8 (e4m3/e5m2 in the
step's program; FP8 GEMMs on a GPU), their scaling state follows the delayed-scaling rule step by step, and training
on real text tracks bf16 with context parallelism (the 200-step comparison is
benchmarks/fp8_convergence.py; checkpoint resume with FP8 state is in test_train_resume.py)."""

import dataclasses
import json
from collections import Counter
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer import fp8, model
from longctx_trainer.contract.config import DataConfig, Fp8Config, OptimizerConfig, ParallelConfig, TrainerConfig
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import StepFunctions, train
from support.hlo import fp8_dots
from support.tiny import tiny_trainer_config

CORPUS = Path(json.__file__).parent  # byte-level Python sources, on every machine


def _config(precision: str, context: int, steps: int, history: int = 16) -> TrainerConfig:
    return tiny_trainer_config(
        global_batch_tokens=256,
        steps=steps,
        precision=precision,
        fp8=Fp8Config(amax_history=history),
        parallelism=ParallelConfig(context=context),
        optimizer=OptimizerConfig(learning_rate=3e-3, warmup_steps=5),
        data=DataConfig(kind="text", path=str(CORPUS), seed=5),
        seed=2,
    )


def _train(config: TrainerConfig) -> tuple[list[float], dict]:
    events = []
    state = train(
        config,
        make_mesh(config.parallelism, jax.devices()[: config.parallelism.devices]),
        emit=events.append,
        metrics=TrainMetrics("test", 0),
        peak_flops_per_device=1e12,
    )
    return [e["loss"] for e in events if e["event"] == "step"], state


def test_fp8_tracks_bf16_with_context_parallelism_and_keeps_its_scaling_state():
    bf16, _ = _train(_config("bf16", context=4, steps=30))
    fp8_losses, state = _train(_config("fp8", context=4, steps=30, history=8))
    assert bf16 != fp8_losses  # the FP8 path really ran: its rounding shows in the losses
    assert fp8_losses[-1] < fp8_losses[0] - 1.0  # it learns (uniform bytes start at ln 256)
    np.testing.assert_allclose(np.mean(fp8_losses[-5:]), np.mean(bf16[-5:]), rtol=0.02)

    # Every matmul's operands have their own state: the last 8 amaxes, and the scale they give.
    scaling = jax.tree.map(np.asarray, state["params"]["fp8"]["layers"])
    assert set(scaling) == set(model.FP8_MATMULS)
    for name, per_layer in scaling.items():
        for operand, dtype in (("x", fp8.E4M3), ("w", fp8.E4M3), ("grad", fp8.E5M2)):
            history, scale = per_layer[operand]["amax_history"], per_layer[operand]["scale"]
            assert history.shape == (2, 8) and (history > 0).all(), (name, operand, history)
            np.testing.assert_allclose(scale, history.max(axis=1) / fp8.fp8_max(dtype), rtol=1e-6)
        assert not np.array_equal(per_layer["w"]["amax_history"][0], per_layer["w"]["amax_history"][1])


def _lowered_step(precision: str, context: int = 2):
    config = _config(precision, context=context, steps=1)
    fns = StepFunctions(config, make_mesh(config.parallelism, jax.devices()[:context]))
    tokens = jax.ShapeDtypeStruct((config.batch_size, config.sequence_length), jnp.int32)
    return fns.step.lower(fns.abstract_state(), tokens, tokens, None)


def test_the_step_program_has_every_layer_matmul_as_a_matchable_fp8_dot():
    """Each of the layer matmuls (config.FP8_MATMULS) gives one forward and two backward dots in the
    form the GPU GEMM rewriter matches (support.hlo.fp8_dots); bf16 has no FP8 at all."""
    fp8_text, bf16_text = _lowered_step("fp8").as_text(dialect="hlo"), _lowered_step("bf16").as_text(dialect="hlo")
    kinds = Counter(fp8_dots(fp8_text))
    matmuls = len(model.FP8_MATMULS)
    assert kinds[("f8e4m3fn", "f8e4m3fn")] >= matmuls, kinds  # forward (again under remat)
    assert kinds[("f8e5m2", "f8e4m3fn")] == matmuls and kinds[("f8e4m3fn", "f8e5m2")] == matmuls, kinds  # dX, dW
    assert "f8e4m3fn" not in bf16_text and "f8e5m2" not in bf16_text


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="FP8 GEMMs need a GPU with FP8 tensor cores")
def test_a_gpu_runs_the_layer_matmuls_as_fp8_gemms():
    """The compiled step calls cuBLASLt's FP8 GEMM forward (e4m3 only) and backward (an e5m2 operand)."""
    text = _lowered_step("fp8", context=1).compile().as_text()  # one GPU is enough
    gemms = [line for line in text.splitlines() if "__cublas$lt$matmul$f8" in line]
    assert gemms, "XLA did not rewrite the quantized dots into FP8 GEMMs"
    assert any("f8e5m2" in line for line in gemms), "the backward's e5m2 dots are not FP8 GEMMs"
    assert any("f8e5m2" not in line for line in gemms), "the forward's e4m3 dots are not FP8 GEMMs"


def test_an_fp8_lm_head_merges_its_loss_chunks_into_one_scaling_state():
    config = _config("fp8", context=2, steps=1).model_copy(update={"fp8": Fp8Config(amax_history=4, lm_head=True)})
    mesh = make_mesh(config.parallelism, jax.devices()[:2])
    options = dataclasses.replace(model.ModelOptions.from_config(config), loss_chunk_tokens=8)  # 4 chunks a shard
    assert options.fp8 == model.Fp8Layout(history=4, lm_head=True)
    params = model.Model(config.model, mesh, options).with_fp8_state(model.init_params(config.model, jax.random.key(0)))
    tokens = jax.random.randint(jax.random.key(1), (config.batch_size, config.sequence_length), 0, config.model.vocab)
    targets = jnp.roll(tokens, -1, axis=1)

    def loss(opts, p):
        return model.Model(config.model, mesh, opts).loss(p, tokens, targets)

    value, grads = jax.jit(jax.value_and_grad(partial(loss, options)))(params)
    bf16_head = dataclasses.replace(options, fp8=model.Fp8Layout(history=4))  # the layers still FP8
    without_head_state = {**params, "fp8": {"layers": params["fp8"]["layers"]}}
    reference = jax.jit(partial(loss, bf16_head))(without_head_state)
    assert value != reference  # the head's FP8 rounding shows
    np.testing.assert_allclose(value, reference, rtol=1e-2)
    head = jax.tree.map(np.asarray, grads["fp8"]["lm_head"])  # the updated state: one, not one per chunk
    for operand, dtype in (("x", fp8.E4M3), ("w", fp8.E4M3), ("grad", fp8.E5M2)):
        history, scale = head[operand]["amax_history"], head[operand]["scale"]
        assert history.shape == (4,) and history[0] > 0 and (history[1:] == 0).all(), (operand, history)
        np.testing.assert_allclose(scale, history[0] / fp8.fp8_max(dtype), rtol=1e-6)
    assert head["w"]["amax_history"][0] == np.abs(np.asarray(params["lm_head"])).max()  # the whole head, once


def test_shared_state_takes_the_largest_amax_of_its_uses():
    state = fp8.einsum_state(history=3)
    x = (
        jnp.asarray(np.random.default_rng(1).standard_normal((3, 5, 8)), jnp.float32)
        * jnp.asarray([1.0, 7.0, 2.0])[:, None, None]
    )
    w = jnp.ones((8, 4), jnp.float32)

    def total(s):
        shared = fp8.shared_across(s, 3)
        return sum(
            jnp.sum(fp8.fp8_einsum("bh,hv->bv", x[i], w, jax.tree.map(lambda a, i=i: a[i], shared))) for i in range(3)
        )

    updated = jax.grad(total)(state)
    assert float(updated["x"]["amax_history"][0]) == float(jnp.max(jnp.abs(x)))  # the 7x chunk's, not a sum
    assert float(updated["w"]["amax_history"][0]) == 1.0
