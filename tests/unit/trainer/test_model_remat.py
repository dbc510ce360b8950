"""What the remat'ed layers keep for the backward: only each layer's input (remat policy full), on the host
with offload; with policy save_attention and offload, attention's output goes there too.

Checked on the traced program (jax.ad_checkpoint.print_saved_residuals), so it holds on any
backend: the host offload probe is forced on, as it would be on a GPU.
"""

import jax
import numpy as np
import pytest
from jax.ad_checkpoint import print_saved_residuals

from longctx_trainer import model
from longctx_trainer.contract.config import ModelConfig, ParallelConfig
from longctx_trainer.mesh import make_mesh
from support.tiny_model import model_options

MODEL = ModelConfig(layers=3, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=64)
BATCH, SEQ = 2, 16


def _saved_residuals(capsys, offload: bool) -> list[str]:
    options = model_options(remat=True, offload=offload, load_balance="none")
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    params = model.init_params(MODEL, jax.random.key(0))
    tokens = np.zeros((BATCH, SEQ), np.int32)
    capsys.readouterr()
    print_saved_residuals(model.Model(MODEL, mesh, options).loss, params, tokens, tokens)
    return [line for line in capsys.readouterr().out.splitlines() if "from the argument" not in line]


@pytest.mark.parametrize("offload,memory", [(False, "f32"), (True, "f32<host>")])
def test_layers_keep_only_their_input(capsys, monkeypatch, offload, memory):
    monkeypatch.setattr(model, "host_offload_available", lambda platform: True)
    types = [line.split(" ")[0] for line in _saved_residuals(capsys, offload)]
    stacked = [t for t in types if f"[{MODEL.layers}," in t]  # one entry per layer
    assert stacked == [f"{memory}[{MODEL.layers},{BATCH},{SEQ},{MODEL.hidden}]"], types


def test_saved_attention_goes_to_the_host_with_offload(capsys, monkeypatch):
    """Remat policy save_attention with offload (host probe forced on, as on a GPU): the layer
    input and attention's output are offloaded (`<host>`); attention's residuals are saved where
    the attention ops put them."""
    monkeypatch.setattr(model, "host_offload_available", lambda platform: True)
    options = model_options(remat=True, offload=True, load_balance="none", remat_policy="save_attention")
    mesh = make_mesh(ParallelConfig(), jax.devices()[:1])
    params = model.init_params(MODEL, jax.random.key(0))
    tokens = np.zeros((BATCH, SEQ), np.int32)
    capsys.readouterr()
    print_saved_residuals(model.Model(MODEL, mesh, options).loss, params, tokens, tokens)
    lines = [line for line in capsys.readouterr().out.splitlines() if "from the argument" not in line]
    stacked = [line.split(" ")[0] for line in lines if f"[{MODEL.layers}," in line.split(" ")[0]]
    heads = f"[{MODEL.layers},{BATCH},{SEQ},{MODEL.heads},{MODEL.head_dim}]"
    assert f"f32<host>[{MODEL.layers},{BATCH},{SEQ},{MODEL.hidden}]" in stacked  # the layer input
    assert f"f32<host>{heads}" in stacked, stacked  # attention's output
    assert len(stacked) > 2  # and attention's residuals
