"""The planner's count of what a layer keeps for the backward equals what the traced trainer keeps."""

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.ad_checkpoint import print_saved_residuals

from longctx_operator.planner.costs import (
    layer_input_bytes_per_token,
    saved_attention_bytes_per_token,
)
from longctx_trainer.contract.config import ModelConfig, ParallelConfig
from longctx_trainer.mesh import make_mesh
from longctx_trainer.model import Model, init_params
from support.tiny_model import model_options


def test_saved_tensors_per_layer_match_what_the_trainer_keeps(capsys):
    """Remat policy save_attention: the bytes of the per-layer residuals (stacked over the layers
    by the scan) of the traced bf16 program equal the planner's layer input plus
    saved_attention_bytes_per_token, per token and layer; full remat keeps the input only."""
    config = ModelConfig(layers=3, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=64)
    batch, seq = 2, 16
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    params = init_params(config, jax.random.key(0))
    tokens = np.zeros((batch, seq), np.int32)
    kept = {}
    for policy in ("full", "save_attention"):
        options = model_options(compute_dtype=jnp.bfloat16, remat=True, load_balance="none", remat_policy=policy)
        capsys.readouterr()
        print_saved_residuals(Model(config, mesh, options).loss, params, tokens, tokens)
        lines = capsys.readouterr().out.splitlines()
        stacked = [line.split(" ")[0] for line in lines if "from the argument" not in line]
        stacked = [t for t in stacked if f"[{config.layers}," in t]
        kept[policy] = sum(
            {"bf16": 2, "f32": 4}[t.split("[")[0]] * math.prod(int(d) for d in t.split("[")[1].rstrip("]").split(","))
            for t in stacked
        ) // (config.layers * batch * seq)
    assert kept["full"] == layer_input_bytes_per_token(config, "bf16")
    assert kept["save_attention"] == kept["full"] + saved_attention_bytes_per_token(config, "bf16", 1)
