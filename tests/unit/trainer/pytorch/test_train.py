"""trainer/pytorch/train.py: the same job on one process and on two (context parallel 2, or data
parallel 2) or four (both) over gloo gives the same losses for 10 steps, fp32."""

import pytest

from support.torch_gloo import run_gloo
from support.torch_train_worker import train_losses

STEPS = 10
TOLERANCE = 1e-6
"""Relative, fp32: only the order of the gradient and loss sums differs between layouts (1.2e-7
measured for context 2, 4, data 2 and 2 x 2)."""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> str:
    """Byte-level text with little to learn but its words: the loss falls within 10 steps."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text("the ring passes keys and values to the next rank. " * 200)
    return str(path)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory, corpus):
    (losses,) = run_gloo(1, train_losses, 1, 1, STEPS, corpus, tmp=tmp_path_factory.mktemp("one"))
    return losses


def test_one_process_learns(one_process):
    assert len(one_process) == STEPS
    assert one_process[-1] < one_process[0] - 0.1, one_process  # from about ln 256


@pytest.mark.parametrize("data, context", [(1, 2), (2, 1), (2, 2)], ids=["context2", "data2", "data2-context2"])
def test_more_processes_give_the_losses_of_one(tmp_path, corpus, one_process, data, context):
    ranks = run_gloo(data * context, train_losses, data, context, STEPS, corpus, tmp=tmp_path)
    assert all(r == ranks[0] for r in ranks)  # every rank reports the global loss
    assert ranks[0] == pytest.approx(one_process, rel=TOLERANCE)
