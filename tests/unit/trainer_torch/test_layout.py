"""trainer/pytorch/layout.py and the entry point's checks: the layout and identity from the pod
environment, context-major ranks, and one-line refusals of what the example cannot run."""

import subprocess
import sys

import pytest

from longctx_trainer import podenv
from longctx_trainer.pytorch.__main__ import check_agrees
from longctx_trainer.pytorch.layout import Layout, LayoutError
from support.torch_train_worker import tiny_config

ENV = {
    podenv.DATA_PARALLEL: "2",
    podenv.CONTEXT_PARALLEL: "2",
    podenv.TENSOR_PARALLEL: "1",
    podenv.SEQUENCE_LENGTH: "64",
    podenv.WORLD_SIZE: "4",
    podenv.RANK: "3",
}


def test_layout_from_the_pod_environment_is_context_major():
    layout = Layout.from_environ(ENV)
    assert (layout.data, layout.context, layout.world_size, layout.sequence_length) == (2, 2, 4, 64)
    indices = [Layout(2, 2, rank, 64) for rank in range(4)]
    assert [(x.data_index, x.context_index) for x in indices] == [(0, 0), (0, 1), (1, 0), (1, 1)]


@pytest.mark.parametrize(
    "change, message",
    [
        ({podenv.TENSOR_PARALLEL: "2"}, "no tensor parallelism"),
        ({podenv.WORLD_SIZE: "8"}, "is not data 2 x context 2"),
        ({podenv.SEQUENCE_LENGTH: "63"}, "does not divide over context 2"),
        ({podenv.RANK: None}, "RANK is not set"),
    ],
)
def test_layouts_the_example_cannot_run_are_refused(change, message):
    env = {k: v for k, v in (ENV | change).items() if v is not None}
    with pytest.raises(LayoutError, match=message):
        Layout.from_environ(env)


def test_the_config_must_agree_with_the_environment(tmp_path):
    layout = Layout.from_environ(ENV)
    config = tiny_config(2, 2, 1, str(tmp_path))
    check_agrees(config, layout)
    with pytest.raises(ValueError, match="not the environment's"):
        check_agrees(tiny_config(1, 2, 1, str(tmp_path)), layout)
    with pytest.raises(ValueError, match="fp32 only"):
        check_agrees(config.model_copy(update={"precision": "bf16"}), layout)


def test_a_bad_config_ends_with_one_line(tmp_path):
    config = tmp_path / "trainer.yaml"
    config.write_text("{}")
    result = subprocess.run(
        [sys.executable, "-m", "longctx_trainer.pytorch", "--config", str(config)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1
    assert result.stderr.startswith("longctx_trainer.pytorch: ") and "Traceback" not in result.stderr
