"""What the remat'ed layers keep for the backward: only each layer's input, on the host with offload.

Checked on the traced program (jax.ad_checkpoint.print_saved_residuals), so it holds on any
backend: the host offload probe is forced on, as it would be on a GPU.
"""

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from longctx_trainer import model
from longctx_trainer.contract.config import ModelConfig, ParallelConfig
from longctx_trainer.mesh import make_mesh

DIMS = ModelConfig(layers=3, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=64).dims()
BATCH, SEQ = 2, 16


def _saved_residuals(capsys, offload: bool) -> list[str]:
    options = model.ModelOptions(
        compute_dtype=jnp.float32, remat=True, offload=offload, chunk_tokens=None, attention="ring", load_balance="none"
    )
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    params = model.init_params(DIMS, jax.random.key(0))
    tokens = np.zeros((BATCH, SEQ), np.int32)
    capsys.readouterr()
    print_saved_residuals(partial(model.loss_fn, dims=DIMS, mesh=mesh, options=options), params, tokens, tokens)
    return [line for line in capsys.readouterr().out.splitlines() if "from the argument" not in line]


@pytest.mark.parametrize("offload,memory", [(False, "f32"), (True, "f32<host>")])
def test_layers_keep_only_their_input(capsys, monkeypatch, offload, memory):
    monkeypatch.setattr(model, "host_offload_available", lambda platform: True)
    types = [line.split(" ")[0] for line in _saved_residuals(capsys, offload)]
    stacked = [t for t in types if f"[{DIMS.layers}," in t]  # one entry per layer
    assert stacked == [f"{memory}[{DIMS.layers},{BATCH},{SEQ},{DIMS.hidden}]"], types
