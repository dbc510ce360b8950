"""The JAX model of the trainer's tests: fp32 ModelOptions, and one model's loss and gradients
on a CPU mesh (tests/unit/conftest.py makes eight devices)."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from longctx_trainer import model
from longctx_trainer.contract.config import ModelConfig, ParallelConfig
from longctx_trainer.mesh import make_mesh
from support.tiny import TINY_MODEL


def model_options(**changes) -> model.ModelOptions:
    """fp32, no remat, no offload, the ring with dual-chunk-swap; `changes` replace any of them."""
    options = dict(
        compute_dtype=jnp.float32,
        remat=False,
        offload=False,
        chunk_tokens=None,
        attention="ring",
        load_balance="dual_chunk_swap",
    )
    return model.ModelOptions(**{**options, **changes})


def loss_and_grads(
    parallel: ParallelConfig, options: model.ModelOptions, *, batch: int, seq: int, config: ModelConfig = TINY_MODEL
):
    """(loss, gradients, parameters) of `config` over one seeded random batch of `batch` x `seq`
    tokens, on the first parallel.devices devices laid out as `parallel`."""
    mesh = make_mesh(parallel, jax.devices()[: parallel.devices])
    lm = model.Model(config, mesh, options)
    params = jax.jit(partial(model.init_params, config), out_shardings=lm.param_shardings())(jax.random.key(1))
    tokens = np.random.default_rng(0).integers(0, config.vocab, (batch, seq + 1))
    value, grads = jax.jit(jax.value_and_grad(lm.loss))(params, tokens[:, :-1], tokens[:, 1:])
    return float(value), jax.tree.map(np.asarray, grads), params
