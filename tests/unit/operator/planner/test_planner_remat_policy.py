"""The planner's remat policy (planner/plan.py, costs.py, timing.py): save_attention's saved
tensors in the memory model, one attention forward in the step time, and the choice of
save_attention wherever it fits."""

from dataclasses import replace

import pytest

from longctx_operator.planner import PlanRequest, plan
from longctx_operator.planner.costs import saved_attention_bytes_per_token
from longctx_operator.planner.layouts import Layout
from longctx_operator.planner.plan import memory_for
from longctx_operator.planner.timing import StepInputs, compute_seconds
from longctx_trainer.contract.flops import flops_per_token
from longctx_trainer.contract.hardware import FABRICS, GPUS
from longctx_trainer.contract.presets import PRESETS

ONE_B = PRESETS["1b"]


def request(seq: int, gpu: str = "h100-80gb", **overrides) -> PlanRequest:
    """The 1b preset, one sequence per step on one GPU."""
    base = dict(
        model=ONE_B, sequence_length=seq, global_batch_tokens=seq, nodes=1, gpus_per_node=1, gpu=gpu,
        fabric="infiniband",
    )  # fmt: skip
    return PlanRequest(**{**base, **overrides})


def test_saved_attention_bytes_per_token_of_the_1b_preset():
    """bf16 attention output twice, q (3 x 2048) and k, v (2 x 512), and 32 fp32 log-sum-exps."""
    assert saved_attention_bytes_per_token(ONE_B, "bf16", 1) == 2 * (3 * 2048 + 2 * 512) + 4 * 32 == 14464
    assert saved_attention_bytes_per_token(ONE_B, "bf16", 2) == 14464 // 2


@pytest.mark.parametrize("chunk", [None, 4096])
def test_saving_adds_the_saved_tensors_of_every_layer(chunk):
    """Without offload every layer's tensors stay on the device; with offload two layers' do (the
    one moving and the one in use) and all go to the host."""
    req, layout, tokens = request(65536), Layout(1, 1, 1), 65536
    full, saving = memory_for(req, layout, chunk), memory_for(req, layout, chunk, save_attention=True)
    per_layer = saved_attention_bytes_per_token(ONE_B, "bf16", 1) * tokens
    on_device = 2 if chunk else ONE_B.layers
    assert saving.activations - full.activations == on_device * per_layer
    assert saving.host_offloaded - full.host_offloaded == (ONE_B.layers * per_layer if chunk else 0)


def test_the_planner_saves_attention_where_it_fits():
    """128K tokens: the saved tensors fit on one H100, and the choice is the fastest fitting."""
    planned = plan(request(131072))
    assert planned.chosen.remat_policy == "save_attention" and not planned.chosen.offload
    assert planned.step_seconds == min(c.step_seconds for c in planned.candidates if c.fits)


def test_the_planner_keeps_full_remat_where_saving_does_not_fit():
    """256K tokens of the 1b preset on one H100: saving would need about 118 GiB; full remat fits."""
    planned = plan(request(262144))
    assert planned.chosen.remat_policy == "full" and not planned.chosen.offload
    assert (
        memory_for(request(262144), planned.chosen.layout, None, save_attention=True).total
        > planned.chosen.memory.usable
    )


def test_saving_runs_attention_forward_once_in_the_step_time():
    """Compute of save_attention is full remat's less one causal attention forward (a third of
    attention's forward and backward)."""
    req = request(65536)
    inputs = StepInputs(
        model=ONE_B, gpu=GPUS[req.gpu], fabric=FABRICS[req.fabric], layout=Layout(1, 1, 1), gpus_per_node=1,
        sequence_length=65536, global_batch_tokens=65536, precision="bf16", recompute=True, attention="ring",
        load_balance="dual_chunk_swap", chunk_tokens=None, host_saved_bytes=0,
    )  # fmt: skip
    saved = compute_seconds(replace(inputs, save_attention=True))
    attention_forward = flops_per_token(ONE_B, 65536).attention_causal / 3 * 65536 / GPUS[req.gpu].achievable_flops
    assert compute_seconds(inputs) - saved == pytest.approx(attention_forward, rel=1e-9)


def test_no_recompute_means_no_policy():
    assert plan(request(8192, recompute=False)).chosen.remat_policy == "full"
