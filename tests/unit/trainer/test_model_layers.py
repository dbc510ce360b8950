"""Model building blocks against plain numpy formulas (fp32).

Tolerances from the errors measured on 2026-11-24, about 4x: RMSNorm 2.3e-7 relative (entries
0.004 to 4.8), RoPE 3.3e-7 absolute (entries 0.008 to 2.7), the chunked cross-entropy 7.5e-8
relative.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer import model
from longctx_trainer.contract.config import LOSS_CHUNK_TOKENS, ParallelConfig, loss_chunk
from longctx_trainer.contract.presets import preset
from longctx_trainer.mesh import make_mesh
from support import mutants
from support.tiny_model import model_options


def test_rms_norm_matches_formula():
    x = np.random.default_rng(0).normal(size=(3, 5, 16)).astype(np.float32)
    scale = np.linspace(0.5, 2, 16, dtype=np.float32)
    expected = x / np.sqrt(np.mean(x**2, axis=-1, keepdims=True) + 1e-5) * scale
    np.testing.assert_allclose(model.rms_norm(jnp.asarray(x), jnp.asarray(scale)), expected, rtol=1e-6, atol=0)


def test_rope_rotates_pairs_by_position_angle():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(1, 4, 2, 8)).astype(np.float32)
    positions = np.array([3, 0, 7, 1])  # a permuted order: angles follow the positions given
    out = np.asarray(model.rope(jnp.asarray(x), jnp.asarray(positions), theta=100.0))
    for t, pos in enumerate(positions):
        for i in range(4):
            angle = pos * 100.0 ** (-i / 4)
            a, b = x[0, t, :, i], x[0, t, :, i + 4]
            np.testing.assert_allclose(out[0, t, :, i], a * np.cos(angle) - b * np.sin(angle), rtol=1e-6, atol=1.3e-6)
            np.testing.assert_allclose(
                out[0, t, :, i + 4], b * np.cos(angle) + a * np.sin(angle), rtol=1e-6, atol=1.3e-6
            )


def test_rope_check_fails_when_the_frequencies_are_one_index_off(monkeypatch):
    mutants.rope_frequencies_one_index_off(monkeypatch)
    with pytest.raises(AssertionError):
        test_rope_rotates_pairs_by_position_angle()


def test_param_shapes_count_matches_preset_param_count():
    for config in (
        preset("tiny"),
        preset("1b"),
        preset("llama3-8b"),
    ):
        shapes = model.param_shapes(config)
        leaves = [s for s in shapes.values() if isinstance(s, tuple)] + list(shapes["layers"].values())
        assert sum(int(np.prod(s)) for s in leaves) == config.param_count()


@pytest.mark.parametrize("chunk_tokens", [4, 8, 3])  # 3 does not divide the shard: chunks of 2
def test_chunked_cross_entropy_matches_full_logits(chunk_tokens):
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 16, 8)).astype(np.float32)
    head = rng.normal(size=(8, 11)).astype(np.float32)
    targets = rng.integers(0, 11, (2, 16))
    logits = x @ head
    logp = (
        logits
        - np.log(np.sum(np.exp(logits - logits.max(-1, keepdims=True)), -1, keepdims=True))
        - logits.max(-1, keepdims=True)
    )
    expected = -np.mean(np.take_along_axis(logp, targets[..., None], -1))
    mesh = make_mesh(ParallelConfig(context=2), jax.devices()[:2])
    loss = jax.jit(partial(model.chunked_cross_entropy, mesh=mesh, chunk_tokens=chunk_tokens))
    np.testing.assert_allclose(float(loss(x, head, targets)), expected, rtol=3e-7)


def test_a_loss_chunk_divides_the_shard_and_never_exceeds_the_chunk():
    """An adaptive variant's 17/16 of a 16,384-token shard walks in chunks of 1,088 (2^6 x 17),
    not as one block of 17,408 tokens' fp32 logits (9 GB for a 128K vocabulary)."""
    assert loss_chunk(32_768) == LOSS_CHUNK_TOKENS == 2048
    assert loss_chunk(17_408) == 1088
    assert loss_chunk(34) == 34  # a shard shorter than a chunk is one chunk
    assert loss_chunk(2 * 2053) == 2  # twice a prime: the largest divisor up to 2048
    assert loss_chunk(16, 3) == 2


def _head_grads(logits_fn, dtype):
    rng = np.random.default_rng(3)
    x = jnp.asarray(rng.normal(size=(2, 3, 16, 32)), dtype)
    head = jnp.asarray(rng.normal(size=(32, 50)) / 6, dtype)
    weights = jnp.asarray(rng.normal(size=(2, 3, 16, 50)), jnp.float32)  # a cotangent in fp32, as the loss gives

    def loss(x, head):
        return jnp.sum(jax.nn.log_softmax(logits_fn(x, head)) * weights)

    return jax.jit(jax.grad(loss, (0, 1))), (x, head)


def _autodiff_logits(x, head):
    return jnp.einsum("...h,hv->...v", x, head, preferred_element_type=jnp.float32)


def test_head_logits_gradients_equal_autodiff_in_fp32_and_stay_close_in_bf16():
    """fp32: the same GEMMs as autodiff's, within fp32's rounding of sums over 96 tokens or 50
    classes (1e-6 of the gradient's largest magnitude: XLA's CPU kernels may order the two
    programs' sums differently, and an entry near zero then differs by more than 2e-6 of itself);
    bf16: the gradient taken in bf16 before the GEMMs, within 2% of the fp32 gradients of the same
    bf16 inputs (bf16's 2^-8 rounding of the logits' gradient, summed over 96 tokens and 50
    classes)."""
    ours, args = _head_grads(model.head_logits, jnp.float32)
    autodiff, _ = _head_grads(_autodiff_logits, jnp.float32)
    for a, b in zip(ours(*args), autodiff(*args), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6 * float(jnp.abs(b).max()))
    ours, args = _head_grads(model.head_logits, jnp.bfloat16)
    exact = autodiff(*(a.astype(jnp.float32) for a in args))
    for a, b in zip(ours(*args), exact, strict=True):
        assert a.dtype == jnp.bfloat16
        error = float(jnp.abs(a.astype(jnp.float32) - b).max() / jnp.abs(b).max())
        assert error < 0.02, error


@pytest.mark.parametrize("logits_fn", [model.head_logits, _autodiff_logits])
def test_the_head_backward_runs_no_fp32_gemm_in_bf16(logits_fn):
    """Autodiff's backward promotes the bf16 operands to the fp32 logits gradient: fp32 GEMMs
    (TF32 on a GPU). head_logits' backward has bf16 operands only."""
    from support.hlo import instructions

    grads, args = _head_grads(logits_fn, jnp.bfloat16)
    program = instructions(grads.lower(*args).as_text(dialect="hlo"))
    operand_types = {tuple(program[o].dtype for o in op.operands) for op in program.values() if op.opcode == "dot"}
    fp32_gemms = {t for t in operand_types if "f32" in t}
    assert (fp32_gemms == set()) == (logits_fn is model.head_logits), operand_types


def test_rope_scaling_of_factor_one_changes_nothing():
    """What the API documents for turning a preset's scaling off."""
    from longctx_trainer.contract.model import RopeScaling

    plain = model.rope_frequencies(128, 500000.0)
    np.testing.assert_array_equal(model.rope_frequencies(128, 500000.0, RopeScaling(factor=1.0)), plain)
    assert not np.allclose(model.rope_frequencies(128, 500000.0, RopeScaling(factor=32.0)), plain)


def test_a_model_is_hashable_so_a_jitted_function_compiles_once_per_model():
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    options = model_options(load_balance="none")
    traced = []

    @partial(jax.jit, static_argnums=0)
    def param_count(lm: model.Model) -> jax.Array:
        traced.append(lm)
        return jnp.asarray(lm.config.param_count())

    same = [model.Model(preset("tiny"), mesh, options) for _ in range(2)]
    assert hash(same[0]) == hash(same[1])
    for lm in same:
        param_count(lm)
    assert len(traced) == 1
    param_count(model.Model(preset("125m"), mesh, options))
    assert len(traced) == 2
