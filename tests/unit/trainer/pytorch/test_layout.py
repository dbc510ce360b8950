"""trainer/pytorch/layout.py and the entry point's checks: the layout and identity from the pod
environment, context-major ranks, and one-line refusals of what the example cannot run."""

import subprocess
import sys

import pytest

from longctx_trainer.contract import podenv
from longctx_trainer.contract.config import OffloadConfig, PackingConfig
from longctx_trainer.contract.model import RopeScaling
from longctx_trainer.pytorch.__main__ import check_agrees, unsupported
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


def _with(config, **changes):
    """The config with nested fields replaced ("parallelism.attention": "ulysses"), validated again."""
    data = config.model_dump()
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = data
        for name in parents:
            node = node[name]
        node[leaf] = value.model_dump() if hasattr(value, "model_dump") else value
    return type(config).model_validate(data)


@pytest.mark.parametrize(
    "changes, line",
    [
        ({"parallelism__attention": "ulysses"}, "parallelism.attention: ulysses: "),
        (
            {"parallelism__attention": "hybrid", "parallelism__ulysses": 2, "parallelism__context": 4},
            "parallelism.attention: hybrid: ",
        ),
        ({"parallelism__attention": "all_gather"}, "parallelism.attention: allGather: "),
        ({"parallelism__tensor": 2}, "parallelism.tensor: 2: "),
        ({"offload": OffloadConfig(enabled=True)}, "offload: "),
        ({"offload": OffloadConfig(chunk_tokens=16)}, "offload: "),
        ({"data__packing": PackingConfig(document_mask=True)}, "data.packing: "),
        ({"data__packing": PackingConfig(reset_positions=True)}, "data.packing: "),
        ({"communication": "nvshmem"}, "communication.collectivePermute: nvshmem: "),
        ({"model__rope_scaling": RopeScaling(factor=8)}, "model.ropeScaling: "),
        ({"precision": "bf16"}, "precision: bf16: "),
        ({"init_from": "/weights"}, "initFrom: "),
    ],
    ids=[
        "ulysses",
        "hybrid",
        "allGather",
        "tensor",
        "offload",
        "offload-chunkTokens",
        "packing-documentMask",
        "packing-resetPositions",
        "nvshmem",
        "ropeScaling",
        "precision",
        "initFrom",
    ],
)
def test_each_setting_the_example_does_not_implement_is_refused(tmp_path, changes, line):
    config = _with(tiny_config(2, 2, 1, str(tmp_path)), **changes)
    problem = unsupported(config)
    assert problem is not None and problem.startswith(line) and "\n" not in problem


def test_what_the_example_implements_passes(tmp_path):
    config = tiny_config(2, 2, 1, str(tmp_path))
    assert unsupported(config) is None
    assert unsupported(_with(config, parallelism__load_balance="striped")) is None
    assert unsupported(_with(config, model__rope_scaling=RopeScaling(factor=1))) is None  # factor 1: none


def test_a_refused_setting_ends_the_process_with_one_line(tmp_path):
    from longctx_trainer.contract.config import dump_config

    config = tmp_path / "trainer.yaml"
    config.write_text(dump_config(_with(tiny_config(2, 2, 1, str(tmp_path)), parallelism__attention="ulysses")))
    env = {k: v for k, v in ENV.items()} | {"PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "longctx_trainer.pytorch", "--config", str(config)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert result.returncode == 1
    why = "parallelism.attention: ulysses: the PyTorch example implements ring attention only"
    assert result.stderr == f"longctx_trainer.pytorch: {why}\n"
