"""Worked example: llama3-8b, one 262,144-token sequence per step, 32 x h100-80gb (4 nodes x 8),
bf16, recompute, ring attention with dual-chunk-swap, layout data=1 context=8 tensor=4.

Every expected number is computed by hand below (see docs/planner.md for the formulas); the
planner must agree to 1e-9 relative: the derivation is exact, and on 2026-11-24 every value
matched to within pytest.approx's 1e-12 absolute floor (rel=0).
"""

import pytest

from longctx_operator.planner import plan
from longctx_operator.planner.layouts import Layout
from longctx_operator.planner.plan import memory_for
from support.plans import WORKED_LAYOUT, plan_request

GIB = 1024**3
REL = 1e-9  # exact derivation; 1e-9 only absorbs float summation order

# Model: L=32, h=4096, heads=32, kv_heads=8, head_dim=128, kv_dim=1024, ffn=14336, vocab=128256.
P = 8_030_261_248  # all parameters (test_planner_params)
DEVICES = 32
SHARD = 262_144 // 8  # 32,768 tokens of the sequence per device (context=8)

# ZeRO-3 shards over all 32 devices.
PARAMS = 2 * P / DEVICES  # bf16: 501,891,328 B = 0.467 GiB
MASTER = 4 * P / DEVICES  # fp32: 1,003,782,656 B
ADAM = 8 * P / DEVICES  # fp32 m and v: 2,007,565,312 B
GRADS = 4 * P / DEVICES  # fp32 (w.r.t. the master weights): 1,003,782,656 B
# Two gathered layers (218,112,000 params each) and the LM head (128256*4096=525,336,576), bf16,
# split over tensor=4: (436,224,000 + 525,336,576) * 2 / 4 = 480,780,288 B
GATHERED = (2 * 218_112_000 + 525_336_576) * 2 / 4
# Activations, per token of the 32,768-token shard:
#   saved layer inputs: 32 layers * 4096 * 2 B = 262,144 B
#   one layer recomputed: 4h replicated (16,384 values) * 2 B = 32,768 B
#     + (2h + 2*kv_dim + 3*ffn = 8,192 + 2,048 + 43,008 = 53,248 values) * 2 B / 4 = 26,624 B
#     + fp32 log-sum-exp 4 B * 32 heads / 4 = 32 B                    -> 59,424 B
#   = 321,568 B * 32,768 = 10,537,418,752 B
# plus the loss chunk: 2048 tokens (they divide the shard) of fp32 logits of a quarter of the
#   vocabulary and their gradient: 2 * 4 * 128256 / 4 = 256,512 B * 2048 = 525,336,576 B
LOSS_CHUNK = 256_512 * 2048
ACTIVATIONS = (262_144 + 59_424) * SHARD + LOSS_CHUNK  # 11,062,476,800 B
# Attention working set: two K/V blocks of the shard on this tensor rank
#   (2 * 1024/4 = 512 values/token * 32,768 = 16,777,216 values), each in bf16 plus an fp32 dK/dV
#   accumulator: 2 * 16,777,216 * (2 + 4) = 201,326,592 B; fp32 dQ: 4 * 4096/4 * 32,768 = 134,217,728 B
ATTENTION = 2 * 16_777_216 * 6 + 134_217_728  # 335,544,320 B
# Embedding lookup: the whole 128,256 x 4,096 table gathered in bf16 (1,050,673,152 B), in the
#   backward its bf16 cotangent plus that cast to fp32 (2 + 4 B per entry: 3,152,019,456 B), and
#   the gradient of the 32,768 looked-up tokens, 2 * 4096 * 32,768 = 268,435,456 B.
EMBEDDING = 128_256 * 4096 * (2 + 4) + 268_435_456  # 3,420,454,912 B
# It is never alive with the activations (before the first layer's forward and after its
# backward), so the total counts the larger phase: here the layers' 11.4 GB.
STATE = PARAMS + MASTER + ADAM + GRADS  # 4,517,021,952 B
TOTAL = STATE + GATHERED + ACTIVATIONS + ATTENTION  # 16,395,823,360 B = 15.27 GiB

# FLOPs per token. N (matmul params) = 32 * 218,112,000 + 4,096 (final norm) + 525,336,576 (LM head)
#   = 7,504,924,672; 6N = 45,029,548,032.
# Causal attention 6*L*H*Q*T = 6 * 32 * 32 * 128 * 262,144 = 206,158,430,208.
FLOPS_CAUSAL = 45_029_548_032 + 206_158_430_208  # 251,187,978,240
FLOPS_FULL = 45_029_548_032 + 2 * 206_158_430_208  # 457,346,408,448
# Compute time: recompute adds 2 * 6,979,588,096 (layer weights) + 2*32*4096*262,144 (attention)
#   = 82,678,652,928 FLOPs/token; (251,187,978,240 + 82,678,652,928) * 262,144 tokens / 32 GPUs
#   / (989e12 * 0.5 sustained) = 5.531 s
COMPUTE_SECONDS = (FLOPS_CAUSAL + 82_678_652_928) * 262_144 / 32 / (989e12 * 0.5)


@pytest.fixture(scope="module")
def worked():
    return plan(plan_request(**WORKED_LAYOUT))


@pytest.mark.parametrize(
    "field, expected",
    [
        ("params", PARAMS),
        ("master_weights", MASTER),
        ("optimizer_moments", ADAM),
        ("gradients", GRADS),
        ("gathered_params", GATHERED),
        ("activations", ACTIVATIONS),
        ("attention_working_set", ATTENTION),
        ("embedding_lookup", EMBEDDING),
        ("total", TOTAL),
    ],
)
def test_memory_per_component(worked, field, expected):
    assert getattr(worked.chosen.memory, field) == pytest.approx(expected, rel=REL)


def test_peak_is_in_the_layers_at_long_context(worked):
    assert worked.chosen.memory.peak_phase == "layers"


def test_embedding_lookup_is_the_peak_at_short_context():
    # 32,768 tokens over context 8: 4,096-token shards, two 2,048-token loss chunks.
    memory = _variant(sequence_length=32_768, global_batch_tokens=32_768)
    # Layers: 321,568 B * 4,096 + the loss chunk 525,336,576 B = 1,842,479,104 B, plus attention
    # 2 * 512 * 4,096 * 6 + 4 * 1,024 * 4,096 = 41,943,040 B: 1.88 GB.
    assert memory.activations + memory.attention_working_set == pytest.approx(1_842_479_104 + 41_943_040, rel=REL)
    # Lookup: 3,152,019,456 B of table and its fp32 cast + 2 * 4096 * 4,096 = 33,554,432 B.
    embedding = 3_152_019_456 + 33_554_432  # 3,185,573,888 B
    assert memory.embedding_lookup == pytest.approx(embedding, rel=REL)
    assert memory.peak_phase == "embedding lookup"
    assert memory.total == pytest.approx(STATE + GATHERED + embedding, rel=REL)  # 8,183,376,128 B


def test_capacity_and_no_offload(worked):
    assert worked.chosen.memory.capacity == 80 * GIB
    assert worked.chosen.memory.usable == pytest.approx(0.9 * 80 * GIB, rel=1e-9)
    assert worked.chosen.offload is False and worked.chosen.chunk_tokens is None
    assert worked.chosen.memory.host_offloaded == 0


def test_flops_per_token_both_conventions(worked):
    assert worked.flops_per_token.causal == pytest.approx(FLOPS_CAUSAL, rel=REL)
    assert worked.flops_per_token.full == pytest.approx(FLOPS_FULL, rel=REL)


def test_compute_time_tokens_per_second_and_mfu(worked):
    assert worked.chosen.step.compute == pytest.approx(COMPUTE_SECONDS, rel=REL)
    assert worked.step_seconds >= worked.chosen.step.compute
    assert worked.chosen.tokens_per_second == pytest.approx(262_144 / worked.step_seconds, rel=1e-9)
    mfu = FLOPS_CAUSAL * 262_144 / (worked.step_seconds * 32 * 989e12)
    assert worked.chosen.mfu == pytest.approx(mfu, rel=REL)
    # Recompute's extra forward caps MFU below the 50% sustained matmul rate.
    assert worked.chosen.mfu < 0.5 * FLOPS_CAUSAL / (FLOPS_CAUSAL + 82_678_652_928) * 1.0001


def test_tensor_parallel_all_reduces(worked):
    # 2 all-reduces per layer and forward pass (forward + recompute) plus 2 in backward: 6 per
    # layer, 32 layers, of 32,768 tokens * 4096 * 2 B = 268,435,456 B each; a ring all-reduce over
    # 4 GPUs moves 2*3/4 of that over NVLink at 450 GB/s * 0.8.
    expected = 32 * 6 * (2 * 3 / 4) * 268_435_456 / (450e9 * 0.8)
    assert worked.chosen.step.tensor_parallel == pytest.approx(expected, rel=REL)


def _variant(chunk=None, **overrides):
    """Memory of the worked example's layout with some request fields changed (and offload in
    chunks of `chunk` tokens when given)."""
    return memory_for(plan_request(**overrides), Layout(1, 8, 4), chunk)


def test_without_recompute_every_layer_keeps_its_full_activations():
    memory = _variant(recompute=False)
    # 32 layers * 59,424 B per token of the 32,768-token shard, and the same loss chunk.
    assert memory.activations == pytest.approx(32 * 59_424 * SHARD + LOSS_CHUNK, rel=REL)


def test_fp32_training_has_no_master_copy():
    memory = _variant(precision="fp32")
    assert memory.master_weights == 0
    assert memory.params == pytest.approx(4 * P / DEVICES, rel=REL)
    # Layer inputs 32 * 4096 * 4 B, recomputed layer 4 * 16,384 + 4 * 53,248 / 4 + 32; the loss
    # chunk's logits are fp32 in both precisions.
    per_token = 32 * 4096 * 4 + (4 * 16_384 + 4 * 53_248 // 4 + 32)
    assert memory.activations == pytest.approx(per_token * SHARD + LOSS_CHUNK, rel=REL)


def test_loss_chunk_is_the_largest_divisor_of_the_shard_when_2048_does_not_divide_it():
    # 24,576 tokens over context 8: 3,072-token shards, not a multiple of 2048, so the trainer
    # (and the planner) walk them in two chunks of 1,536 (contract.config.loss_chunk).
    memory = _variant(sequence_length=24_576, global_batch_tokens=24_576)
    assert memory.activations == pytest.approx((262_144 + 59_424) * 3_072 + 256_512 * 1_536, rel=REL)


def test_offload_keeps_two_layer_inputs_on_the_device_and_the_rest_on_the_host():
    memory = _variant(offload=True, chunk=4096)
    # Device: 2 layer inputs (8,192 B per token) and one recomputed layer (59,424 B) over the
    # whole shard -- the trainer chunks only attention -- plus the same loss chunk.
    assert memory.activations == pytest.approx((2 * 8_192 + 59_424) * SHARD + LOSS_CHUNK, rel=REL)
    # Host: all 32 layer inputs, 32 * 8,192 B * 32,768 = 8,589,934,592 B, and the shard's K/V on
    # this tensor rank, 512 values * 2 B * 32,768 = 33,554,432 B.
    assert memory.host_offloaded == pytest.approx(8_589_934_592 + 33_554_432, rel=REL)
    # Attention: two 4,096-token K/V chunks (512 values/token, bf16 + fp32 dK/dV) and fp32 dQ of
    # one 4,096-token query chunk (1,024 values/token): 2*512*4096*6 + 4*1024*4096 = 41,943,040 B.
    assert memory.attention_working_set == pytest.approx(41_943_040, rel=REL)
