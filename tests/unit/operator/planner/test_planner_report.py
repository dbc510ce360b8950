"""The text table and the JSON rendering of a plan."""

import json

import pytest

from longctx_operator.planner import GIB, format_table, plan, to_json
from support.plans import plan_request


@pytest.fixture(scope="module")
def issue_example():
    """The issue's command: llama3-8b at 262144 tokens on 32 h100-80gb, 8 per node."""
    return plan(plan_request(global_batch_tokens=4 * 262_144))


def test_table_shows_choice_memory_speed_and_rejections(issue_example):
    text = format_table(issue_example)
    mem = issue_example.chosen.memory
    assert f"Chosen layout: {issue_example.chosen.layout}" in text
    for label, value in [
        ("params (compute copy)", mem.params),
        ("activations", mem.activations),
        ("Adam moments (fp32)", mem.optimizer_moments),
        ("embedding lookup", mem.embedding_lookup),
        ("total", mem.total),
    ]:
        assert any(
            line.split()[: len(label.split())] == label.split() and f"{value / GIB:.2f}" in line
            for line in text.splitlines()
        ), label
    assert f"of {mem.usable / GIB:.2f} usable" in text
    assert f"peak in the {mem.peak_phase}" in text
    assert f"{issue_example.chosen.tokens_per_second:,.0f} tokens/s" in text
    assert f"MFU {100 * issue_example.chosen.mfu:.1f}% (causal)" in text
    assert "Rejected layouts:" in text
    assert "data=1 context=1 tensor=32: tensor=32 exceeds 8 GPUs per node" in text
    assert "data=8 context=4 tensor=1: batch of 4 sequences not divisible by data=8" in text
    fitting_others = sum(c.fits for c in issue_example.candidates) - 1
    section = text.split("Other layouts that fit (slower):\n")[1].split("\n\n")[0]
    assert len(section.splitlines()) == 1 + fitting_others  # header + one row each


def test_json_round_trips_and_matches_the_plan(issue_example):
    data = json.loads(json.dumps(to_json(issue_example)))
    assert data["layout"] == {
        "data": issue_example.chosen.layout.data,
        "context": issue_example.chosen.layout.context,
        "tensor": issue_example.chosen.layout.tensor,
    }
    assert data["memory"]["bytes"]["total"] == issue_example.chosen.memory.total
    assert data["memory"]["bytes"]["optimizerMoments"] == issue_example.chosen.memory.optimizer_moments
    assert data["memory"]["bytes"]["embeddingLookup"] == issue_example.chosen.memory.embedding_lookup
    assert data["memory"]["peakPhase"] == issue_example.chosen.memory.peak_phase
    assert data["flopsPerToken"]["causal"] == issue_example.flops_per_token.causal
    assert data["flopsPerToken"]["full"] == issue_example.flops_per_token.full
    assert data["tokensPerSecond"] == issue_example.chosen.tokens_per_second
    assert data["stepSeconds"] == pytest.approx(sum(data["step"].values()), rel=1e-9)
    assert len(data["candidates"]) == len(issue_example.candidates)
    rejected = [c for c in data["candidates"] if not c["fits"]]
    assert rejected and all(r["field"].startswith("spec.") and r["message"] for c in rejected for r in c["reasons"])
