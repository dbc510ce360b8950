"""A run stopped after a checkpoint and resumed continues exactly (bitwise) as an uninterrupted one,
FP8 scaling state included."""

import jax
import numpy as np
import pytest

from longctx_trainer.contract.config import (
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import StepFunctions
from support.training import run


class Interrupted(Exception):
    pass


def _config(checkpoint_dir, precision: str) -> TrainerConfig:
    return TrainerConfig(
        model=ModelConfig(layers=2, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=128),
        sequence_length=32,
        global_batch_tokens=128,
        steps=6,
        precision=precision,
        parallelism=ParallelConfig(data=2, context=2, tensor=2),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=2),
        data=DataConfig(kind="synthetic", seed=7),
        checkpoint=CheckpointConfig(path=str(checkpoint_dir), interval_steps=2, keep=2),
    )


@pytest.mark.parametrize("precision", ["fp32", "fp8"])  # fp8: the amax histories are restored too
def test_resume_continues_exactly(tmp_path, precision):
    whole, parts = _config(tmp_path / "whole", precision), _config(tmp_path / "parts", precision)
    mesh = make_mesh(whole.parallelism)
    fns = StepFunctions(whole, mesh)  # one compilation shared by the three runs

    whole_events = []
    final = jax.tree.map(np.asarray, run(whole, whole_events.append, mesh, fns=fns))

    def stop_after_step_4_checkpoint(event):
        first_events.append(event)
        if event["event"] == "checkpoint" and event["step"] == 4:
            raise Interrupted

    first_events, resumed_events = [], []
    with pytest.raises(Interrupted):
        run(parts, stop_after_step_4_checkpoint, mesh, fns=fns)
    resumed = jax.tree.map(np.asarray, run(parts, resumed_events.append, mesh, fns=fns))

    losses = {e["step"]: e["loss"] for e in whole_events if e["event"] == "step"}
    resumed_losses = {e["step"]: e["loss"] for e in resumed_events if e["event"] == "step"}
    assert sorted(resumed_losses) == [5, 6]  # it did resume from step 4, not from scratch
    assert resumed_events[0] == {"event": "resume", "step": 4}
    assert not any(e["event"] == "resume" for e in whole_events + first_events)
    assert resumed_losses == {s: losses[s] for s in (5, 6)}
    assert int(resumed["step"]) == 6
    if precision == "fp8":  # one amax per step entered every history, restored ones included
        history = resumed["params"]["fp8"]["layers"]["wq"]["x"]["amax_history"]
        assert history.shape == (2, 16) and ((history > 0).sum(axis=1) == 6).all(), history
    assert jax.tree.structure(final) == jax.tree.structure(resumed)
    for (path, a), b in zip(jax.tree.flatten_with_path(final)[0], jax.tree.leaves(resumed), strict=True):
        np.testing.assert_array_equal(a, b, err_msg=jax.tree_util.keystr(path))
    # keep=2: only the two latest checkpoints remain.
    assert sorted(int(p.name) for p in (tmp_path / "parts").iterdir() if p.name.isdigit()) == [4, 6]
