"""Layout enumeration and the human-readable reasons a layout is rejected."""

import re

import pytest

from longctx_operator.planner import GIB, PlanError, plan
from longctx_operator.planner.layouts import Layout, enumerate_layouts
from longctx_operator.planner.plan import evaluate
from longctx_trainer.contract.presets import PRESETS
from support.plans import plan_request

LLAMA8B = PRESETS["llama3-8b"]


def request(**overrides):
    return plan_request(**{"nodes": 3, **overrides})


@pytest.mark.parametrize(
    "devices, count",
    [
        (1, 1),
        (32, 21),  # 2^5: ways to split 5 factors of 2 over 3 axes = C(7,2) = 21
        (24, 30),  # 2^3 * 3: C(5,2) = 10 splits of the 2s times 3 places for the 3
    ],
)
def test_enumeration_is_every_ordered_factorisation(devices, count):
    layouts = enumerate_layouts(devices)
    assert len(layouts) == count == len(set(layouts))
    assert all(layout.devices == devices for layout in layouts)


@pytest.fixture(scope="module")
def reasons_24():
    """Reasons per layout for llama3-8b, one 256K sequence, 3 nodes x 8 GPUs."""
    req = request()
    return {layout: evaluate(req, layout).reasons for layout in enumerate_layouts(24)}


@pytest.mark.parametrize(
    "layout, expected",
    [
        (
            Layout(1, 1, 24),
            [
                "tensor=24 exceeds 8 GPUs per node",
                "tensor=24 does not divide heads=32",
                "tensor=24 does not divide kv_heads=8",
            ],
        ),
        (
            Layout(1, 8, 3),
            [
                "tensor=3 does not divide 8 GPUs per node",
                "tensor=3 does not divide heads=32",
                "tensor=3 does not divide kv_heads=8",
            ],
        ),
        (Layout(1, 3, 8), ["sequence 262144 not divisible by 2*context=6"]),
        (Layout(3, 8, 1), ["batch of 1 sequence not divisible by data=3"]),
        (Layout(1, 24, 1), ["sequence 262144 not divisible by 2*context=48"]),
    ],
)
def test_rejection_reasons(reasons_24, layout, expected):
    assert list(reasons_24[layout]) == expected


def test_no_valid_layout_of_24_gpus_is_a_plan_error(reasons_24):
    # 262144 = 2^18, so only power-of-two contexts split it; tensor must be 1, 2, 4 or 8 and
    # data 1 (one sequence): 24 = context * tensor leaves no such layout.
    assert all(reasons for reasons in reasons_24.values())
    with pytest.raises(PlanError) as error:
        plan(request())
    assert error.value.field == "spec.resources.nodes"
    assert "none of the 30 layouts of 24 GPUs is valid" in error.value.message


def test_striped_needs_only_context_to_divide_the_sequence():
    layout = Layout(1, 8, 3)
    candidate = evaluate(
        request(load_balance="striped", sequence_length=3 * 2**16, global_batch_tokens=3 * 2**16), layout
    )
    assert not any("not divisible by" in reason for reason in candidate.reasons)
    candidate = evaluate(
        request(load_balance="striped", sequence_length=100_000, global_batch_tokens=100_000), Layout(1, 3, 8)
    )
    assert "sequence 100000 not divisible by context=3" in candidate.reasons


def test_memory_reason_states_needed_and_usable_gib():
    req = request(sequence_length=1_048_576, global_batch_tokens=1_048_576, nodes=1, offload=False)
    candidate = evaluate(req, Layout(1, 8, 1))
    assert not candidate.fits
    (reason,) = candidate.reasons
    match = re.fullmatch(r"needs (\d+\.\d) GiB per GPU > (\d+\.\d) GiB usable", reason)
    assert match, reason
    assert float(match[1]) == pytest.approx(candidate.memory.total / GIB, abs=0.05)
    assert match[2] == "72.0"
    assert candidate.rejections[0].field == "spec.resources.nodes"


def test_auto_offload_failure_keeps_both_reasons():
    # llama3-70b on 8 GPUs: its 16 bytes of state per parameter alone need 131 GiB per GPU.
    req = request(model=PRESETS["llama3-70b"], nodes=1)
    candidate = evaluate(req, Layout(1, 8, 1))
    without, offloaded = candidate.reasons
    assert re.fullmatch(r"needs \d+\.\d GiB per GPU > 72\.0 GiB usable", without)
    assert re.fullmatch(
        r"needs \d+\.\d GiB per GPU > 72\.0 GiB usable even with offload "
        r"\(chunk 2048 tokens\)",
        offloaded,
    )
    # The smallest chunk tried: the covering bound for h=8192 on an H100 is
    # 4.945e14 * 1024 * 2 / (2 * 8192 * 5.12e10) = 1207.3 tokens, so 2048.
    assert candidate.offload and candidate.memory.total / GIB == pytest.approx(float(offloaded.split()[1]), abs=0.05)
