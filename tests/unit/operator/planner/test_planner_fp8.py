"""precision fp8 in the planner, against hand calculations: the layer matmuls at the FP8 rate
(LM head and attention at the bf16 rate), the FP8 weight copies and scaling state in memory, and
GPUs without FP8 refused with the field named."""

import pytest

from longctx_operator.planner import PlanError, plan
from longctx_trainer.contract.presets import PRESETS
from support.plans import plan_request

LLAMA8B = PRESETS["llama3-8b"]
BF16 = 989e12 * 0.5  # sustained H100 FLOP/s, dense bf16
FP8 = 1979e12 * 0.5  # sustained H100 FLOP/s, dense FP8


def request(**overrides):
    base = dict(sequence_length=131_072, global_batch_tokens=131_072, data=1, context=16, tensor=2, remat_policy="full")
    return plan_request(**{**base, **overrides})


def test_layer_matmuls_run_at_the_fp8_rate_by_hand():
    m, tokens = LLAMA8B, 131_072 / 32  # tokens per GPU
    layers = 8 * m.non_embedding_param_count()  # 6N forward+backward, 2N recomputed forward
    head = 6 * m.vocab * m.hidden
    attention = 6 * m.layers * m.hidden * 131_072 * 4 / 3  # causal, a third more for recompute
    bf16, fp8 = plan(request()).chosen.step.compute, plan(request(precision="fp8")).chosen.step.compute
    assert bf16 == pytest.approx(tokens * (layers + head + attention) / BF16, rel=1e-9)
    assert fp8 == pytest.approx(tokens * (layers / FP8 + (head + attention) / BF16), rel=1e-9)


def test_fp8_adds_weight_copies_and_scaling_state_to_memory():
    m = LLAMA8B
    bf16, fp8 = plan(request()).chosen.memory, plan(request(precision="fp8")).chosen.memory
    assert fp8.gathered_params - bf16.gathered_params == pytest.approx(2 * m.params_per_layer() / 2, abs=1)
    assert fp8.fp8_scaling == m.layers * 7 * 3 * (16 + 1) * 4 and bf16.fp8_scaling == 0
    assert fp8.activations == bf16.activations  # activations stay bf16
    assert fp8.total == bf16.total + (fp8.gathered_params - bf16.gathered_params) + fp8.fp8_scaling


def test_fp8_halves_the_matmuls_and_exposes_the_communication_they_hid():
    short = dict(sequence_length=8192, global_batch_tokens=8192 * 32, context=1, tensor=1, data=32)
    bf16, fp8 = plan(request(**short)).chosen.step, plan(request(precision="fp8", **short)).chosen.step
    assert 1.5 < bf16.compute / fp8.compute < 2.0  # FP8 doubles the dense rate; attention and the LM head do not
    assert fp8.zero_exposed > bf16.zero_exposed  # the ZeRO gathers no longer hide behind compute
    assert fp8.total == pytest.approx(bf16.total, rel=1e-3)  # bound by the gathers: FP8 gains nothing here


@pytest.mark.parametrize("gpu", ["a100-80gb", "a100-40gb"])
def test_a_gpu_without_fp8_is_refused(gpu):
    with pytest.raises(PlanError) as error:
        plan(request(gpu=gpu, precision="fp8", fabric="infiniband"))
    assert error.value.field == "spec.precision"
