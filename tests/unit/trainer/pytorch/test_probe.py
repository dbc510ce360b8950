"""trainer/pytorch/probe.py: the PyTorch example's compute probe, its median and its export by the
training loop (the operator's straggler attribution reads it as it reads the JAX trainer's)."""

import pytest
import torch

from longctx_trainer.contract.health import PROBE_KEPT, probe_work
from longctx_trainer.pytorch import probe
from support.torch_gloo import run_gloo
from support.torch_train_worker import observed_times


def test_the_probe_time_is_the_median_of_the_last_runs():
    class Scripted(probe.ComputeProbe):
        times = iter([9.0, 1.0, 50.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # the first: the warm-up run

        def _time(self):
            return next(self.times)

    scripted = Scripted(torch.device("cpu"))
    assert PROBE_KEPT == 5  # the expected medians below are over the last five
    assert [scripted.measure() for _ in range(7)] == [1.0, 25.5, 2.0, 2.5, 3.0, 4.0, 4.0]


def test_the_probe_runs_the_shared_work_on_the_cpu():
    side, matmuls, dtype = probe_work("cpu")
    real = probe.ComputeProbe(torch.device("cpu"))
    assert real._input.shape == (side, side) and real._input.dtype == getattr(torch, dtype)
    assert real._matmuls == matmuls
    assert real.measure() > 0
    x = torch.eye(4) * 0.5
    assert torch.allclose(probe.chain(x, 3), torch.tanh(torch.tanh(torch.tanh(x @ x) @ x) @ x))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("the ring passes keys and values to the next rank. " * 200)
    return str(path)


@pytest.mark.parametrize("every, exported", [(2, 3), (0, 0)], ids=["every-2-steps", "never"])
def test_the_training_loop_exports_a_probe_every_so_many_steps(tmp_path, corpus, every, exported):
    (times,) = run_gloo(1, observed_times, every, 6, corpus, tmp=tmp_path)
    assert len(times["probe"]) == exported and all(p > 0 for p in times["probe"])
    assert len(times["data"]) == 6 and all(d > 0 for d in times["data"])  # every batch's reading, probe or not
