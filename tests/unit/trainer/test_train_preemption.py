"""trainer/preemption.py in one process: a SIGTERM during a step makes the loop save that step,
between interval checkpoints, and raise Preempted; at the last step it just finishes. (Several
processes agreeing on the step: tests/integration/test_trainer_preemption.py.)"""

import os
import signal

import pytest

from longctx_trainer.contract.config import (
    CheckpointConfig,
    DataConfig,
    ModelConfig,
    OptimizerConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.contract.termination import Preempted
from longctx_trainer.preemption import Preemption
from support.training import run


@pytest.fixture
def sigterm_restored():
    before = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, before)


def _train(tmp_path, steps: int, signal_at: int) -> list[dict]:
    config = TrainerConfig(
        model=ModelConfig(layers=1, hidden=32, heads=4, kv_heads=2, ffn=64, vocab=128),
        sequence_length=32,
        global_batch_tokens=64,
        steps=steps,
        precision="fp32",
        parallelism=ParallelConfig(data=2, context=2, tensor=2),
        optimizer=OptimizerConfig(learning_rate=1e-2, warmup_steps=1),
        data=DataConfig(kind="synthetic", seed=7),
        checkpoint=CheckpointConfig(path=str(tmp_path), interval_steps=100),
    )
    events = []

    def emit(event):
        events.append(event)
        if event == {**event, "event": "step", "step": signal_at}:
            os.kill(os.getpid(), signal.SIGTERM)  # as a deleted pod's, mid-run

    run(config, emit, preemption=Preemption(1))
    return events


def test_a_sigterm_saves_the_step_in_flight_and_stops(tmp_path, sigterm_restored):
    with pytest.raises(Preempted) as stop:
        _train(tmp_path, steps=10, signal_at=3)
    assert stop.value.step == 3
    assert sorted(int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()) == [3]


def test_a_sigterm_at_the_last_step_just_finishes(tmp_path, sigterm_restored):
    events = _train(tmp_path, steps=2, signal_at=2)
    assert events[-1] == {"event": "done", "step": 2}
    assert not any(e["event"] == "preempted" for e in events)
