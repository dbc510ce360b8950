"""trainer/pytorch/train.py's copies of the JAX trainer's choices: weight decay spares the norm
scales as there, and the ranks' shards of a step's batch tile the JAX trainer's global batch
(samples s*B .. s*B+B-1)."""

import numpy as np
import pytest
import torch

from longctx_trainer.contract.config import OptimizerConfig
from longctx_trainer.contract.sources import SyntheticTokens
from longctx_trainer.pytorch.layout import Layout
from longctx_trainer.pytorch.model import Llama
from longctx_trainer.pytorch.train import local_batch, make_optimizer, sequence_positions
from support.torch_train_worker import tiny_config


def test_weight_decay_spares_norm_scales(tmp_path):
    model = Llama(tiny_config(1, 1, 1, str(tmp_path)).model)
    optimizer, _ = make_optimizer(model, OptimizerConfig(weight_decay=0.5), 10)
    decayed, kept = optimizer.param_groups
    names = {id(p): n for n, p in model.named_parameters()}
    assert decayed["weight_decay"] == 0.5 and kept["weight_decay"] == 0.0
    assert all("norm" in names[id(p)] for p in kept["params"]) and len(kept["params"]) == 2 * 2 + 1
    assert not any("norm" in names[id(p)] for p in decayed["params"])


@pytest.mark.parametrize("scheme", ["dual_chunk_swap", "none", "striped"])
def test_rank_shards_tile_the_global_batch(tmp_path, scheme):
    config = tiny_config(2, 2, 1, str(tmp_path))
    config = config.model_copy(update={"parallelism": config.parallelism.model_copy(update={"load_balance": scheme})})
    source = SyntheticTokens(256, config.sequence_length, seed=5)
    step = 3
    windows = np.stack([source.sample(step * config.batch_size + i) for i in range(config.batch_size)])
    inputs = torch.zeros(config.batch_size, config.sequence_length, dtype=torch.int64)
    targets = torch.zeros_like(inputs)
    seen = []
    for rank in range(4):
        layout = Layout(2, 2, rank, config.sequence_length)
        positions = sequence_positions(config, layout)[layout.context_index]
        x, y = local_batch(source, step, config, layout, positions)
        rows = slice(layout.data_index * 2, layout.data_index * 2 + 2)
        inputs[rows, positions], targets[rows, positions] = x, y
        seen.append(positions)
    assert sorted(torch.cat(seen[:2]).tolist()) == list(range(config.sequence_length))  # one ring: every token once
    if scheme == "dual_chunk_swap":  # context rank 0 holds chunks 0 and 3 of 4
        assert seen[0].tolist() == [*range(16), *range(48, 64)]
    assert torch.equal(inputs, torch.from_numpy(windows[:, :-1].astype(np.int64)))
    assert torch.equal(targets, torch.from_numpy(windows[:, 1:].astype(np.int64)))
