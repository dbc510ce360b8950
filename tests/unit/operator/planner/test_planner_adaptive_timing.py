"""operator/planner/timing.py with an adaptive variant, adaptive.py's expected step and plan.py
with parallelism.adaptive: the step time of adaptive context parallelism from the variants a
corpus's batches take, the layouts it can run on (no offload, shards a multiple of 32), and the
layout choice and `longctx plan` output that follow."""

import json
import math
from dataclasses import replace
from pathlib import Path
from statistics import NormalDist

import pytest
import yaml

from longctx_operator.cli import main
from longctx_operator.planner import PlanError, plan
from longctx_operator.planner.adaptive import expected_step
from longctx_operator.planner.costs import activation_bytes, embedding_lookup_bytes
from longctx_operator.planner.layouts import Layout
from longctx_operator.planner.plan import memory_for
from longctx_operator.planner.timing import StepInputs, step_time
from longctx_trainer.contract.adaptive import Variant, variants
from longctx_trainer.contract.config import loss_chunk
from longctx_trainer.contract.flops import flops_per_token
from longctx_trainer.contract.hardware import FABRICS, GPUS
from support.jobs import job_manifest
from support.plans import plan_request

DOCS = Path(__file__).resolve().parents[4] / "docs" / "planner.md"

F = 989e12 * 0.5  # sustained H100 FLOP/s
TCP = 100e9 / 8 / 8 * 0.6  # bytes/s per GPU: 100 GbE per node, 8 GPUs, 60% sustained
SHORT = (64, 500, 1000)  # every document short: no step needs the ring
LOG_NORMAL = tuple(round(2000 * math.exp(1.5 * NormalDist().inv_cdf((2 * i + 1) / 512))) for i in range(256))
"""docs/planner.md's example corpus: the 256 quantiles (as `longctx tokenize` records them) of a
log-normal of document lengths, median 2,000 tokens, sigma 1.5 (p99 ~66K, longest ~152K)."""


def request(seq=262_144, nodes=2, fabric="tcp", **changes):
    """llama3-8b, one sequence per step, adaptive on, ring attention, 8 H100 per node."""
    job = dict(
        sequence_length=seq, global_batch_tokens=seq, nodes=nodes, fabric=fabric, attention="ring", adaptive=True
    )
    return plan_request(**{**job, **changes})


def inputs(variant=None) -> StepInputs:
    """test_planner_timing's ring over TCP: 262,144 tokens on 32 H100 as 1 x 32 x 1, full remat."""
    return StepInputs(
        model=plan_request().model, gpu=GPUS["h100-80gb"], fabric=FABRICS["tcp"], layout=Layout(1, 32, 1),
        gpus_per_node=8, sequence_length=262_144, global_batch_tokens=262_144, precision="bf16", recompute=True,
        attention="ring", load_balance="dual_chunk_swap", chunk_tokens=None, host_saved_bytes=0, variant=variant,
    )  # fmt: skip


def test_a_variants_ring_part_sets_the_bytes_and_the_block_that_hides_them_by_hand():
    """Shard 8192 tokens; the variant's ring part is 2048 per device, so each ring step sends a
    quarter of the K/V and computes a 2048 x 2048 block (a sixteenth of the fixed ring's)."""
    quarter = variants(262_144, 32)[3]  # the largest adaptive ring part: a quarter shard
    assert quarter == Variant(2048, 8192 + 512 - 2048)
    kv = 2 * 1024 * 2048  # K and V values of the ring part
    block = 2 * 4096 * 2048 * 2048 / F
    per_step = 2 * (kv * 2 / TCP - block) + (kv * 6 / TCP - 2 * block)  # forward twice (recompute)
    assert step_time(inputs(quarter)).ring_exposed == pytest.approx(32 * 31 * per_step, rel=1e-9)
    assert step_time(inputs(Variant(0, 8192 + 512))).ring_exposed == 0


def test_the_layers_run_over_the_variants_padding_and_attention_is_unchanged():
    """The layers and the LM head cost 8704 / 8192 of the fixed layout's; the attention the same."""
    fixed, padded = step_time(inputs()).compute, step_time(inputs(Variant(0, 8192 + 512))).compute
    attention = flops_per_token(inputs().model, 262_144).attention_causal * 4 / 3 * 8192 / F  # recomputed forward
    assert padded == pytest.approx(attention + (fixed - attention) * 8704 / 8192, rel=1e-9)
    assert step_time(inputs(Variant(8192, 0))) == step_time(inputs())  # the fixed variant is the fixed ring


def test_the_expected_step_weights_each_variant_by_its_steps():
    small, whole = Variant(0, 8704), Variant(8192, 0)
    mean = expected_step(inputs(), ((small, 3), (whole, 1)))
    for part in ("compute", "ring_exposed", "zero_exposed", "tensor_parallel"):
        want = (3 * getattr(step_time(inputs(small)), part) + getattr(step_time(inputs(whole)), part)) / 4
        assert getattr(mean, part) == pytest.approx(want, rel=1e-12)


def test_all_documents_long_gives_the_fixed_rings_step():
    """One document spans every sequence: every step takes the fixed variant (all through the ring)."""
    fixed = plan(request(adaptive=False))
    spanning = plan(request(document_lengths=(262_144,)))
    assert fixed.chosen.step.ring_exposed > 0  # the ring is exposed: the equality is not vacuous
    assert spanning.chosen.variant_mix == ((Variant(262_144 // spanning.chosen.layout.context, 0), 64),)
    assert spanning.chosen.layout == fixed.chosen.layout and spanning.step_seconds == fixed.step_seconds


def short_document_speedup() -> float:
    """Fixed-ring step over adaptive step on the same layout, short documents, the ring over TCP."""
    chosen = plan(request(data=1, context=16, tensor=1, document_lengths=SHORT)).chosen
    return chosen.fixed_step.total / chosen.step.total


def test_short_documents_drop_the_exposed_ring_down_to_the_compute_bound():
    chosen = plan(request(data=1, context=16, tensor=1, document_lengths=SHORT)).chosen
    assert chosen.fixed_step.ring_exposed > chosen.fixed_step.compute  # the fixed ring's transfer dominated
    assert chosen.step.ring_exposed == 0 and {v.ring for v, _ in chosen.variant_mix} == {0}
    assert chosen.fixed_step.compute < chosen.step.total < chosen.fixed_step.total / 2
    assert short_document_speedup() > 2


def test_the_mutant_that_ignores_the_variants_ring_part_is_caught(monkeypatch):
    monkeypatch.setattr(StepInputs, "ring_tokens", property(lambda inp: inp.shard_tokens))
    assert short_document_speedup() <= 1  # only the padding's cost is left (here hidden by ZeRO's gathers)


@pytest.mark.parametrize("fabric", ["tcp", "infiniband"])
@pytest.mark.parametrize("seq,nodes", [(131_072, 1), (262_144, 2), (1_048_576, 8)])
def test_never_below_the_compute_only_bound(seq, nodes, fabric):
    """Adaptive saves exposed communication only: its step is never below the fixed layout's
    compute, and where the ring was hidden (NVLink, InfiniBand) it saves nothing."""
    for lengths in (SHORT, LOG_NORMAL):
        chosen = plan(request(seq, nodes, fabric, document_lengths=lengths)).chosen
        fixed = chosen.fixed_step
        assert chosen.step.total >= max(fixed.compute, chosen.step.compute)
        if fixed.ring_exposed == 0:
            assert chosen.step.total >= fixed.total  # at best equal: the padding costs


def test_the_layout_choice_follows_the_adaptive_step():
    """One node, 2 sequences of 64K: the fixed model ties data 2 x context 4 with 1 x 8 and keeps
    the smaller context; with the corpus's lengths 2 x 4 takes padded variants for no ring saving
    (NVLink hid it), so the adaptive step picks 1 x 8, whose steps keep the fixed variant."""
    req = request(65_536, 1, "infiniband", global_batch_tokens=131_072)
    assert plan(req).chosen.layout == Layout(2, 4, 1)
    adaptive = plan(replace(req, document_lengths=LOG_NORMAL)).chosen
    assert adaptive.layout == Layout(1, 8, 1) and adaptive.fixed_step is not None


def test_adaptive_layouts_never_offload_and_need_shards_of_32():
    """The trainer runs adaptive layouts without offload (contract/config.py): where the fixed
    ring offloads, adaptive takes a layout that fits without it."""
    assert plan(request(1_048_576, 2, "infiniband", adaptive=False)).chosen.offload
    assert not plan(request(1_048_576, 2, "infiniband", document_lengths=LOG_NORMAL)).chosen.offload
    with pytest.raises(PlanError) as e:
        plan(request(8 * 4112, 1, data=1, context=8, tensor=1))
    assert e.value.field == "spec.parallelism.context" and "divisible by 32, got 4112" in e.value.message


def test_the_memory_fit_is_the_larger_of_the_fixed_and_the_padded_step():
    """256K over 16: the adaptive trainer compiles the fixed variant (16,384 slots per device, the
    loss in chunks of 2,048) and padded ones (16,384 + 1,024 slots, the loss in chunks of 1,088:
    contract.config.loss_chunk). llama3-8b's 128K vocabulary makes the fixed step's loss chunk the
    larger peak here; a smaller vocabulary makes the padded step's activations the larger."""
    req, layout = request(data=1, context=16, tensor=1), Layout(1, 16, 1)
    fixed = memory_for(replace(req, adaptive=False), layout, None)
    assert memory_for(req, layout, None) == fixed
    small = req.model.model_copy(update={"vocab": 8192})
    padded = memory_for(replace(req, model=small), layout, None)
    fixed = memory_for(replace(req, model=small, adaptive=False), layout, None)
    assert padded.total > fixed.total

    def activations(slots):
        return activation_bytes(
            small, "bf16", tensor=1, resident_tokens=slots, loss_tokens=loss_chunk(slots), recompute=True,
            offload=False,
        ).device  # fmt: skip

    assert (fixed.activations, padded.activations) == (activations(16_384), activations(17_408))
    assert padded.embedding_lookup == embedding_lookup_bytes(small, "bf16", 17_408)


def manifest(tmp_path, lengths) -> str:
    packing = {"documentMask": True} | ({"documentLengths": list(lengths)} if lengths else {})
    job = job_manifest(
        "adaptive",
        preset="llama3-8b",
        sequence_length=262144,
        parallelism={"mode": "manual", "data": 1, "context": 16, "tensor": 1, "adaptive": True},
        resources=(2, 8, "h100-80gb"),
        network={"fabric": "tcp"},
        data={"kind": "tokens", "path": "/data/corpus.bin", "packing": packing},
    )
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return str(path)


def test_longctx_plan_says_which_step_model_timed_it(tmp_path, capsys):
    assert main(["plan", manifest(tmp_path, SHORT)]) == 0
    out = capsys.readouterr().out
    assert (
        "Step model: adaptive context parallelism, the mean of 64 steps drawn from data.packing.documentLengths" in out
    )
    assert "(ring part per device: 0 tokens in 64); the fixed ring on this layout: " in out
    assert main(["plan", manifest(tmp_path, SHORT), "--output", "json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert js["stepModel"]["kind"] == "adaptive" and js["stepModel"]["variants"][0]["ringTokens"] == 0
    assert js["stepModel"]["fixedRingStepSeconds"] > 2 * js["stepSeconds"]
    assert main(["plan", manifest(tmp_path, ())]) == 0
    assert "Step model: the fixed ring (no data.packing.documentLengths)" in capsys.readouterr().out
    assert main(["plan", manifest(tmp_path, ()), "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["stepModel"] == {"kind": "fixed"}


DOC_ROWS = [
    (262_144, 1, "infiniband"),
    (262_144, 2, "infiniband"),
    (262_144, 2, "tcp"),
    (1_048_576, 2, "infiniband"),
    (1_048_576, 8, "infiniband"),
    (1_048_576, 8, "tcp"),
    (2_097_152, 16, "tcp"),
]
"""docs/planner.md's example: llama3-8b, one sequence per step, 8 H100 per node, LOG_NORMAL."""


def docs_row(seq: int, nodes: int, fabric: str) -> str:
    """One row of docs/planner.md's table: the plan with adaptive off and on (layout and step
    seconds), their ratio and the adaptive layout's ring parts (per device: steps drawn)."""
    fixed = plan(request(seq, nodes, fabric, adaptive=False))
    adaptive = plan(request(seq, nodes, fabric, document_lengths=LOG_NORMAL))

    def cell(p) -> str:
        lay = p.chosen.layout
        return f"{lay.data}x{lay.context}x{lay.tensor}{', offload' if p.chosen.offload else ''}, {p.step_seconds:.3f}"

    parts = ", ".join(f"{v.ring:,}: {n}" for v, n in adaptive.chosen.variant_mix)
    ratio = fixed.step_seconds / adaptive.step_seconds
    tokens = f"{seq // 2**20}M" if seq >= 2**20 else f"{seq // 1024}K"
    return f"| {tokens} | {nodes} | {fabric} | {cell(fixed)} | {cell(adaptive)} | {ratio:.2f} | {parts} |"


def test_the_docs_table_is_the_models():
    """docs/planner.md's fixed-against-adaptive table, row by row, as the planner computes it now."""
    section = DOCS.read_text().split("\n### The step time with adaptive context parallelism\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert rows == [docs_row(*row) for row in DOC_ROWS]
