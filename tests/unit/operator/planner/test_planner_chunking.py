"""The FPDT chunk rule: the chunk's attention covers its host transfer, the largest that fits."""

import math

import pytest

from longctx_operator.planner import GPUS, PlanError, plan
from longctx_operator.planner.chunking import (
    MIN_CHUNK_TOKENS,
    chunk_candidates,
    chunk_compute_seconds,
    chunk_transfer_seconds,
    covering_chunk_tokens,
)
from longctx_operator.planner.plan import memory_for
from longctx_trainer.contract.presets import PRESETS
from support.plans import plan_request

LLAMA8B = PRESETS["llama3-8b"]
H100 = GPUS["h100-80gb"]


def test_covering_chunk_by_hand():
    # c >= F * kv_dim * b / (2 * h * B) with F = 989e12 * 0.5, kv_dim = 1024, b = 2, h = 4096,
    # B = 64e9 * 0.8: 4.945e14 * 2048 / (8192 * 5.12e10) = 2414.55 -> 2415 tokens.
    assert covering_chunk_tokens(LLAMA8B, H100, "bf16") == 2415
    # PCIe Gen4 A100: 1.56e14 * 2048 / (8192 * 2.56e10) = 1523.4 -> 1524 tokens.
    assert covering_chunk_tokens(LLAMA8B, GPUS["a100-80gb"], "bf16") == 1524


@pytest.mark.parametrize("gpu", sorted(GPUS))
@pytest.mark.parametrize("tensor", [1, 8])
def test_covering_chunk_is_where_compute_catches_up_with_transfer(gpu, tensor):
    spec = GPUS[gpu]
    chunk = covering_chunk_tokens(LLAMA8B, spec, "bf16")
    assert chunk_compute_seconds(LLAMA8B, spec, tensor, chunk) >= chunk_transfer_seconds(
        LLAMA8B, spec, tensor, "bf16", chunk
    )
    assert chunk_compute_seconds(LLAMA8B, spec, tensor, chunk - 1) < chunk_transfer_seconds(
        LLAMA8B, spec, tensor, "bf16", chunk - 1
    )


def test_chunk_candidates_are_dividing_powers_of_two_above_the_floor():
    assert chunk_candidates(32_768, 2415) == [32_768, 16_384, 8_192, 4_096]
    assert chunk_candidates(3 * 4096, 2415) == [4096]  # 8192 does not divide 12288
    assert chunk_candidates(65_536, 10) == [2**k for k in range(16, 9, -1)]
    assert min(chunk_candidates(65_536, 10)) == MIN_CHUNK_TOKENS
    assert chunk_candidates(2048, 2415) == []


@pytest.mark.parametrize(
    "gpu, preset, sequence, context, tensor",
    [
        ("h100-80gb", "llama3-8b", 2_097_152, 4, 2),
        ("a100-40gb", "3b", 2_097_152, 8, 1),
    ],
)
def test_planner_takes_the_largest_chunk_that_fits(gpu, preset, sequence, context, tensor):
    model = PRESETS[preset]
    req = plan_request(
        model=model,
        sequence_length=sequence,
        global_batch_tokens=sequence,
        nodes=1,
        gpu=gpu,
        data=1,
        context=context,
        tensor=tensor,
    )
    planned = plan(req)
    shard = sequence // context
    chunk = planned.chosen.chunk_tokens
    assert planned.chosen.offload and shard % chunk == 0 and chunk == 2 ** int(math.log2(chunk))
    assert chunk >= covering_chunk_tokens(model, GPUS[gpu], "bf16")
    assert chunk < shard
    assert memory_for(req, planned.chosen.layout, chunk).fits
    assert not memory_for(req, planned.chosen.layout, 2 * chunk).fits
    assert planned.chosen.step.offload_exposed == 0.0  # fetches hide behind compute by construction


def test_smaller_chunk_means_less_memory_but_exposed_fetches_below_the_covering_size():
    base = dict(sequence_length=1_048_576, global_batch_tokens=1_048_576, nodes=1, data=1, context=8, tensor=1)
    planned = plan(plan_request(**base))
    small = plan(plan_request(**base, chunk_tokens=1024))
    assert small.chosen.chunk_tokens == 1024 and small.chosen.offload
    assert small.chosen.memory.total < planned.chosen.memory.total
    assert small.chosen.memory.attention_working_set < planned.chosen.memory.attention_working_set
    assert small.chosen.step.offload_exposed > 0.0


def test_no_chunk_when_the_shard_is_below_the_covering_size():
    # 8 GPUs of context over a 16K sequence leave 2048-token shards: no chunk >= 2415 divides them.
    req = plan_request(
        sequence_length=16_384, global_batch_tokens=16_384, nodes=1, data=1, context=8, tensor=1, offload=True
    )
    with pytest.raises(PlanError) as error:
        plan(req)
    assert error.value.field == "spec.offload.chunkTokens"
    assert "at least 2415 tokens" in error.value.message
    assert "shard of 2048 tokens" in error.value.message
