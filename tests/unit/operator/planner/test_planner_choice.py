"""Which layout the planner picks, when it offloads, and the errors it raises (naming the field)."""

import pytest

from longctx_operator.planner import PlanError, plan
from longctx_operator.planner.layouts import Layout
from longctx_trainer.contract.presets import PRESETS
from support.plans import plan_request

LLAMA8B = PRESETS["llama3-8b"]


def request(**overrides):
    """llama3-8b, four 256K sequences per step on 4 nodes x 8 H100 over InfiniBand."""
    return plan_request(**{"global_batch_tokens": 4 * 262_144, **overrides})


@pytest.fixture(scope="module")
def auto():
    return plan(request())


def test_auto_picks_the_fastest_fitting_layout(auto):
    fitting = [c for c in auto.candidates if c.fits]
    assert len(fitting) >= 2  # a real choice was made
    assert auto.step_seconds == min(c.step_seconds for c in fitting)
    assert auto.chosen.memory.total <= auto.chosen.memory.usable
    chosen = next(c for c in auto.candidates if c.layout == auto.chosen.layout)
    assert chosen.fits and auto.chosen.layout.devices == 32
    assert auto.explanation == f"fastest of {len(fitting)} fitting layouts (auto)"


def test_the_plan_holds_the_chosen_candidate_not_a_copy(auto):
    assert any(c is auto.chosen for c in auto.candidates) and auto.chosen.fits
    assert auto.step_seconds == auto.chosen.step_seconds


def test_auto_does_not_offload_when_the_layout_fits_without(auto):
    assert auto.chosen.offload is False and auto.chosen.chunk_tokens is None


def test_every_layout_is_reported(auto):
    assert len(auto.candidates) == 21
    assert all(c.reasons for c in auto.candidates if not c.fits)


def test_offload_only_when_needed_to_fit():
    # 1M tokens on one node: no layout fits without offload (see the offload=False case below).
    req = request(sequence_length=1_048_576, global_batch_tokens=1_048_576, nodes=1)
    planned = plan(req)
    assert planned.chosen.offload is True and planned.chosen.chunk_tokens is not None
    assert planned.chosen.memory.host_offloaded > 0 and planned.chosen.memory.total <= planned.chosen.memory.usable
    with pytest.raises(PlanError) as error:
        plan(request(sequence_length=1_048_576, global_batch_tokens=1_048_576, nodes=1, offload=False))
    assert error.value.field == "spec.resources.nodes"
    assert "no layout fits on 8 x h100-80gb" in error.value.message
    assert "GiB usable" in error.value.message


def test_offload_forced_on_a_layout_that_fits_anyway():
    forced = plan(request(offload=True, data=4, context=8, tensor=1))
    assert forced.chosen.offload is True and forced.chosen.memory.host_offloaded > 0
    free = plan(request(data=4, context=8, tensor=1))
    assert forced.chosen.memory.total < free.chosen.memory.total


def test_manual_layout_is_validated_and_still_reports_the_others():
    manual = plan(request(data=1, context=8, tensor=4))
    assert manual.chosen.layout == Layout(1, 8, 4)
    assert manual.explanation == "manual layout, validated"
    assert len(manual.candidates) == 21


def test_partial_constraint_fixes_one_axis(auto):
    constrained = plan(request(tensor=2))
    assert constrained.chosen.layout.tensor == 2
    assert constrained.step_seconds >= auto.step_seconds
    assert "(constrained)" in constrained.explanation


@pytest.mark.parametrize(
    "overrides, field, fragment",
    [
        (dict(data=1, context=8, tensor=2), "spec.parallelism", "data*context*tensor = 16 but the job has 32 GPUs"),
        (dict(data=1, context=2, tensor=16), "spec.parallelism.tensor", "tensor=16 exceeds 8 GPUs per node"),
        (dict(data=8, context=4, tensor=1), "spec.parallelism.data", "batch of 4 sequences not divisible by data=8"),
        (dict(nodes=3, data=1, context=8, tensor=3), "spec.parallelism.tensor", "tensor=3 does not divide kv_heads=8"),
        (
            dict(nodes=3, data=1, context=3, tensor=8),
            "spec.parallelism.context",
            "sequence 262144 not divisible by 2*context=6",
        ),
        (
            dict(
                nodes=1,
                data=1,
                context=8,
                tensor=1,
                sequence_length=1_048_576,
                global_batch_tokens=1_048_576,
                offload=False,
            ),
            "spec.resources.nodes",
            "GiB usable",
        ),
        (
            dict(data=1, context=32, tensor=1, chunk_tokens=3000),
            "spec.offload.chunkTokens",
            "chunkTokens=3000 does not divide the per-device shard of 8192 tokens",
        ),
        (dict(tensor=3), "spec.parallelism.tensor", "no layout of 32 GPUs has tensor=3"),
    ],
)
def test_invalid_manual_layouts_raise_naming_the_field(overrides, field, fragment):
    with pytest.raises(PlanError) as error:
        plan(request(**overrides))
    assert error.value.field == field
    assert fragment in error.value.message


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(gpu="h100-94gb"), "spec.resources.gpuType"),
        (dict(fabric="myrinet"), "spec.network.fabric"),
        (dict(global_batch_tokens=262_144 + 1), "spec.globalBatchTokens"),
        (dict(nodes=0), "spec.resources.nodes"),
        (dict(gpus_per_node=0), "spec.resources.gpusPerNode"),
        (dict(sequence_length=0), "spec.sequenceLength"),
        (dict(precision="fp4"), "spec.precision"),
        (dict(attention="tree"), "spec.parallelism.attention"),
        (dict(load_balance="zigzag"), "spec.parallelism.loadBalance"),
        (dict(context=0), "spec.parallelism.context"),
        (dict(chunk_tokens=4096, offload=False), "spec.offload.chunkTokens"),
        (dict(memory_margin=1.5), "memoryMargin"),
    ],
)
def test_invalid_requests_raise_naming_the_field(overrides, field):
    with pytest.raises(PlanError) as error:
        plan(request(**overrides))
    assert error.value.field == field
    assert str(error.value).startswith(field + ": ")


def test_offload_must_fit_in_the_pods_memory_limit():
    """1M tokens on one node offloads about 260 GiB per pod: a 512Gi pod holds it, 256Gi does not."""
    from longctx_operator.planner.plan import HOST_MEMORY_MARGIN, host_bytes_per_pod

    base = dict(sequence_length=1_048_576, global_batch_tokens=1_048_576, nodes=1, remat_policy="full")
    unlimited = plan(request(**base))
    needed = host_bytes_per_pod(unlimited.request, unlimited.chosen.memory)
    assert needed == unlimited.chosen.memory.host_offloaded * 8
    roomy = plan(request(**base, host_memory_bytes=512 * 2**30))
    assert (roomy.chosen.layout, roomy.chosen.chunk_tokens) == (unlimited.chosen.layout, unlimited.chosen.chunk_tokens)
    assert needed <= 512 * 2**30 * HOST_MEMORY_MARGIN
    with pytest.raises(PlanError) as error:
        plan(request(**base, host_memory_bytes=256 * 2**30))
    assert error.value.field == "spec.resources.memory"
    assert "GiB per pod to host memory > 204.8 GiB usable (80% of resources.memory 256.0 GiB)" in error.value.message
    assert needed > 256 * 2**30 * HOST_MEMORY_MARGIN


def test_host_memory_does_not_constrain_a_layout_without_offload():
    small = plan(request(host_memory_bytes=2**30))  # 1 GiB: would hold no offload at all
    assert small.chosen.offload is False and small.chosen.layout == plan(request()).chosen.layout


@pytest.mark.parametrize(
    "overrides, field",
    [
        # an odd sequence splits over no context: the sequence length is to change, not the nodes
        (dict(sequence_length=262_143, global_batch_tokens=262_143), "spec.sequenceLength"),
        # context and tensor pinned leave data=2 for one sequence: the batch is to change
        (dict(nodes=8, context=8, tensor=4, global_batch_tokens=262_144), "spec.globalBatchTokens"),
        # 7 nodes: the 7 goes to data (one sequence) or context (2^18 tokens): no single input is wrong
        (dict(nodes=7, global_batch_tokens=262_144), "spec.resources.nodes"),
    ],
)
def test_no_valid_layout_blames_the_input_every_layout_fails_on(overrides, field):
    with pytest.raises(PlanError) as error:
        plan(request(**overrides))
    assert error.value.field == field
    assert "none of the" in error.value.message
