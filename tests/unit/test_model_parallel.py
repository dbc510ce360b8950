"""The sharded model computes the same loss and gradients as the single-device model.

fp32 throughout; layouts differ only in the order of reductions, so the tolerance is 2e-5
relative (and 1e-7 absolute for gradients near zero).
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from longctx_trainer import model
from longctx_trainer.config import ModelConfig, ParallelConfig
from longctx_trainer.mesh import make_mesh

DIMS = ModelConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256).dims()
SEQ, BATCH = 32, 2


def _options(**changes) -> model.ModelOptions:
    options = dict(compute_dtype=jnp.float32, remat=True, offload=False, chunk_tokens=None,
                   attention="ring", load_balance="dual_chunk_swap")
    return model.ModelOptions(**{**options, **changes})


def _loss_and_grads(parallel: ParallelConfig, options: model.ModelOptions):
    mesh = make_mesh(parallel, jax.devices()[:parallel.devices])
    shardings = model.param_shardings(DIMS, mesh)
    params = jax.jit(partial(model.init_params, DIMS), out_shardings=shardings)(jax.random.key(1))
    tokens = np.random.default_rng(0).integers(0, DIMS.vocab, (BATCH, SEQ + 1))
    loss = partial(model.loss_fn, dims=DIMS, mesh=mesh, options=options)
    value, grads = jax.jit(jax.value_and_grad(loss))(params, tokens[:, :-1], tokens[:, 1:])
    return float(value), jax.tree.map(np.asarray, grads), params


@pytest.fixture(scope="module")
def single_device():
    return _loss_and_grads(ParallelConfig(), _options())


def _assert_same(result, reference):
    (loss, grads, _), (ref_loss, ref_grads, _) = result, reference
    np.testing.assert_allclose(loss, ref_loss, rtol=2e-5)
    flat_ref = dict(jax.tree.flatten_with_path(ref_grads)[0])
    for path, g in jax.tree.flatten_with_path(grads)[0]:
        np.testing.assert_allclose(g, flat_ref[path], rtol=2e-5, atol=1e-7,
                                   err_msg=jax.tree_util.keystr(path))


def test_sharded_model_matches_single_device(single_device):
    """Data 2 x context 2 x tensor 2 (heads and ffn split, sequence split, batch split)."""
    result = _loss_and_grads(ParallelConfig(data=2, context=2, tensor=2), _options())
    _assert_same(result, single_device)
    params = result[2]
    assert params["layers"]["wq"].sharding.spec[2] == "tensor"  # heads really are split
    assert params["layers"]["w_up"].sharding.spec[2] == "tensor"  # and the ffn


def test_chunked_offloaded_all_gather_model_matches_single_device(single_device):
    """offload=True, FPDT chunks of 4 tokens, all-gather attention, context 4 (on CPU host
    placement is the identity and remat is plain: the same code path with the same numerics)."""
    options = _options(offload=True, chunk_tokens=4, attention="all_gather",
                       load_balance="striped")
    _assert_same(_loss_and_grads(ParallelConfig(context=4), options), single_device)


def test_params_are_zero3_sharded_where_divisible():
    mesh = make_mesh(ParallelConfig(data=2, context=2, tensor=2))
    specs = model.param_specs(DIMS, mesh)
    assert specs["layers"]["wq"] == jax.sharding.PartitionSpec(None, ("data", "context"),
                                                               "tensor", None)
    assert specs["layers"]["w_down"] == jax.sharding.PartitionSpec(None, "tensor",
                                                                   ("data", "context"))
    odd = ModelConfig(layers=1, hidden=6, heads=2, kv_heads=2, ffn=6, vocab=10).dims()
    # hidden 6 does not divide over 4 (data x context) devices: that dim stays replicated.
    assert model.param_specs(odd, mesh)["layers"]["w_up"] == jax.sharding.PartitionSpec(
        None, None, "tensor")


def test_bf16_compute_stays_close_to_fp32(single_device):
    """bf16 compute (fp32 master weights, fp32 softmax/loss): loss within 1e-2 relative,
    each gradient within 4e-2 relative error in norm."""
    loss, grads, _ = _loss_and_grads(ParallelConfig(), _options(compute_dtype=jnp.bfloat16))
    ref_loss, ref_grads, _ = single_device
    np.testing.assert_allclose(loss, ref_loss, rtol=1e-2)
    flat_ref = dict(jax.tree.flatten_with_path(ref_grads)[0])
    for path, g in jax.tree.flatten_with_path(grads)[0]:
        assert g.dtype == np.float32  # gradients of the fp32 master weights
        error = np.linalg.norm(g - flat_ref[path]) / np.linalg.norm(flat_ref[path])
        assert error < 4e-2, (jax.tree_util.keystr(path), error)
