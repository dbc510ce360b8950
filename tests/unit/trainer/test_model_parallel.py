"""The sharded model computes the same loss and gradients as the single-device model.

fp32: layouts differ only in the order of reductions. Measured 2026-11-24 (both sharded
layouts against one device): loss within 8.6e-8 relative (one fp32 step); gradients within
2.5e-8 absolute on entries below 10% of their parameter's largest and 3.0e-6 relative on the
others. Tolerances about 4x those. The comparisons must also fail on mutants
(tests/support/mutants.py).
"""

import json
from functools import cache, partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from longctx_trainer import model
from longctx_trainer.contract.config import ModelConfig, ParallelConfig
from longctx_trainer.mesh import make_mesh
from support import mutants
from support.tiny import TINY_MODEL
from support.tiny_model import loss_and_grads, model_options

SEQ, BATCH = 32, 2


def _options(**changes) -> model.ModelOptions:
    return model_options(**{"remat": True, **changes})


_loss_and_grads = partial(loss_and_grads, batch=BATCH, seq=SEQ)


@pytest.fixture(scope="module")
def single_device():
    return _loss_and_grads(ParallelConfig(), _options())


def _assert_same(result, reference):
    (loss, grads, _), (ref_loss, ref_grads, _) = result, reference
    np.testing.assert_allclose(loss, ref_loss, rtol=4e-7)
    flat_ref = dict(jax.tree.flatten_with_path(ref_grads)[0])
    for path, g in jax.tree.flatten_with_path(grads)[0]:
        np.testing.assert_allclose(g, flat_ref[path], rtol=1e-5, atol=1e-7, err_msg=jax.tree_util.keystr(path))


def test_sharded_model_matches_single_device(single_device):
    """Data 2 x context 2 x tensor 2 (heads and ffn split, sequence split, batch split)."""
    result = _loss_and_grads(ParallelConfig(data=2, context=2, tensor=2), _options())
    _assert_same(result, single_device)
    params = result[2]
    assert params["layers"]["wq"].sharding.spec[2] == "tensor"  # heads really are split
    assert params["layers"]["w_up"].sharding.spec[2] == "tensor"  # and the ffn


def test_sharded_check_fails_when_a_shard_has_the_wrong_rope_offset(single_device, monkeypatch):
    """Positions of context shard 2 of 2 one token off: the loss moves by only 2.5e-6 relative
    at initialisation (measured 2026-11-24), the wq and wk gradients by up to 1.7e-4 absolute,
    2.5x relative."""
    mutants.shift_rope_of_last_shard(monkeypatch, context=2)
    with pytest.raises(AssertionError):
        test_sharded_model_matches_single_device(single_device)


def test_chunked_offloaded_all_gather_model_matches_single_device(single_device):
    """offload=True, FPDT chunks of 4 tokens, all-gather attention, context 4 (on CPU host
    placement is the identity and remat is plain: the same code path with the same numerics)."""
    options = _options(offload=True, chunk_tokens=4, attention="all_gather", load_balance="striped")
    _assert_same(_loss_and_grads(ParallelConfig(context=4), options), single_device)


def test_ulysses_model_matches_single_device(single_device):
    """Ulysses attention with data 2 x context 2 x tensor 2: each tensor rank's two query heads
    split over context 2, its one K/V head repeated for both devices (kv_repeat 2)."""
    _assert_same(
        _loss_and_grads(ParallelConfig(data=2, context=2, tensor=2), _options(attention="ulysses")), single_device
    )


def test_hybrid_model_matches_single_device(single_device):
    """Hybrid attention, data 2 x context 4: Ulysses groups of 2 (two query heads and one K/V head
    per device) in a ring of 2, dual-chunk-swap, FPDT chunks of 2 tokens."""
    options = _options(attention="hybrid", ulysses=2, chunk_tokens=2)
    _assert_same(
        _loss_and_grads(ParallelConfig(data=2, context=4, attention="hybrid", ulysses=2), options), single_device
    )


def test_params_are_zero3_sharded_where_divisible():
    mesh = make_mesh(ParallelConfig(data=2, context=2, tensor=2))
    specs = model.Model(TINY_MODEL, mesh, _options()).param_specs()
    assert specs["layers"]["wq"] == jax.sharding.PartitionSpec(None, ("data", "context"), "tensor", None)
    assert specs["layers"]["w_down"] == jax.sharding.PartitionSpec(None, "tensor", ("data", "context"))
    odd = ModelConfig(layers=1, hidden=6, heads=2, kv_heads=2, ffn=6, vocab=10)
    # hidden 6 does not divide over 4 (data x context) devices: that dim stays replicated.
    odd_specs = model.Model(odd, mesh, _options()).param_specs()
    assert odd_specs["layers"]["w_up"] == jax.sharding.PartitionSpec(None, None, "tensor")


ONE_DEVICE = ParallelConfig()


def _training_losses(options: model.ModelOptions, steps: int = 8, parallel: ParallelConfig = ONE_DEVICE) -> np.ndarray:
    """Losses of `steps` Adam steps (learning rate 3e-3) on one fixed batch of Python source
    bytes, from the same initialisation: the model memorises the batch, so the loss falls from
    ln 256 and depends on the model."""
    mesh = make_mesh(parallel, jax.devices()[: parallel.devices])
    text = (Path(json.__file__).parent / "decoder.py").read_bytes()[: BATCH * (SEQ + 1)]
    tokens = np.frombuffer(text, np.uint8).reshape(BATCH, SEQ + 1).astype(np.int32)
    loss = model.Model(TINY_MODEL, mesh, options).loss
    optimizer = optax.adam(3e-3)

    @jax.jit
    def step(params, state):
        value, grads = jax.value_and_grad(loss)(params, tokens[:, :-1], tokens[:, 1:])
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    params = model.init_params(TINY_MODEL, jax.random.key(1))
    state, losses = optimizer.init(params), []
    for _ in range(steps):
        params, state, value = step(params, state)
        losses.append(float(value))
    return np.array(losses)


@cache
def _fp32_training_losses() -> np.ndarray:
    return _training_losses(_options())


def test_bf16_training_follows_fp32():
    """bf16 compute (fp32 master weights, fp32 softmax and loss) follows fp32 over 8 steps in
    which the loss falls from 5.57 to 3.66. Measured 2026-11-24: at most 7.5e-4 relative (3.1e-3
    absolute); tolerance 2e-3 relative. A model with constant logits stays at ln 256 = 5.55."""
    reference = _fp32_training_losses()
    assert reference[-1] < reference[0] - 1.5  # the loss depends on the model
    np.testing.assert_allclose(_training_losses(_options(compute_dtype=jnp.bfloat16)), reference, rtol=2e-3, atol=0)


@pytest.mark.parametrize(
    "parallel",
    [ParallelConfig(context=4, attention="ulysses"), ParallelConfig(context=4, attention="hybrid", ulysses=2)],
    ids=["ulysses", "hybrid"],
)
def test_ulysses_and_hybrid_training_follow_context_1(parallel):
    """20 Adam steps at context 4 (Ulysses: the K/V heads repeated; hybrid: groups of 2 in a ring of
    2) follow the one-device run to 1e-4 in the loss, fp32: the layouts differ only in the order of
    reductions, which 20 steps of a memorising model do not amplify past that."""
    reference = _training_losses(_options(), steps=20)
    assert reference[-1] < reference[0] - 2  # the loss depends on the model
    options = _options(attention=parallel.attention, ulysses=parallel.ulysses)
    np.testing.assert_allclose(_training_losses(options, 20, parallel), reference, rtol=0, atol=1e-4)


def test_bf16_training_check_fails_for_constant_logits(monkeypatch):
    _fp32_training_losses()  # the reference, before the mutant
    mutants.constant_logits(monkeypatch)
    with pytest.raises(AssertionError):
        test_bf16_training_follows_fp32()
