"""trainer/pytorch/ring.py: ring attention over gloo processes equals single-process causal
attention (trainer/pytorch/reference.py), forward and gradients, fp32, with GQA, in every
load-balance layout."""

import pytest
import torch

from longctx_trainer.pytorch.reference import reference_attention
from support.torch_gloo import run_gloo
from support.torch_ring_worker import inputs, positions, ring_shard, ring_shards

TOLERANCE = {"rtol": 1e-5, "atol": 1e-5}
"""fp32: online softmax and the reordered sums differ from the plain softmax by rounding only."""


CASES = {
    2: [(4, 2, "dual_chunk_swap"), (4, 2, "none")],
    4: [(4, 2, "dual_chunk_swap"), (4, 2, "none"), (8, 1, "dual_chunk_swap"), (4, 2, "striped")],
}
"""Ring size -> (heads, kv heads, load balance): GQA with groups of 2, MQA; the balanced layout
(blocks wholly visible, skipped, or masked inside), contiguous shards, round-robin tokens."""


def shape(cp: int, heads: int, kv_heads: int) -> tuple[int, ...]:
    return (2, 8 * cp, heads, kv_heads, 16)  # batch, sequence, heads, kv heads, head dim


@pytest.fixture(scope="module")
def ring_runs(tmp_path_factory):
    """Every case of a ring size from one spawn of its processes, on first use."""
    runs = {}

    def get(cp: int) -> dict:
        if cp not in runs:
            cases = [(shape(cp, h, k), scheme) for h, k, scheme in CASES[cp]]
            ranks = run_gloo(cp, ring_shards, cases, tmp=tmp_path_factory.mktemp(f"cp{cp}"))
            runs[cp] = {case: [r[i] for r in ranks] for i, case in enumerate(CASES[cp])}
        return runs[cp]

    return get


@pytest.mark.parametrize(
    "cp, heads, kv_heads, scheme",
    [(cp, *case) for cp, cases in CASES.items() for case in cases],
    ids=[f"cp{cp}-heads{h}-kv{k}-{scheme}" for cp, cases in CASES.items() for h, k, scheme in cases],
)
def test_ring_forward_and_gradients_equal_one_process(ring_runs, cp, heads, kv_heads, scheme):
    shards = ring_runs(cp)[(heads, kv_heads, scheme)]
    x = inputs(*shape(cp, heads, kv_heads))
    q, k, v = (x[n].clone().requires_grad_() for n in ("q", "k", "v"))
    expected = reference_attention(q, k, v)
    expected.backward(x["dout"])
    layout = positions(x["q"].shape[1], cp, scheme).reshape(-1)  # the shards' tokens, concatenated
    got = {name: torch.cat([s[name] for s in shards], dim=1) for name in ("out", "dq", "dk", "dv")}
    torch.testing.assert_close(got["out"], expected.detach()[:, layout], **TOLERANCE)
    torch.testing.assert_close(got["dq"], q.grad[:, layout], **TOLERANCE)
    torch.testing.assert_close(got["dk"], k.grad[:, layout], **TOLERANCE)
    torch.testing.assert_close(got["dv"], v.grad[:, layout], **TOLERANCE)


def test_one_rank_is_plain_causal_attention(tmp_path):
    """CP 1: the ring is the diagonal block alone (no sends), still the reference."""
    shape = (1, 16, 4, 2, 8)
    (shard,) = run_gloo(1, ring_shard, shape, tmp=tmp_path)
    x = inputs(*shape)
    torch.testing.assert_close(shard["out"], reference_attention(x["q"], x["k"], x["v"]), **TOLERANCE)
