"""operator/planner/plan.py with parallelism.adaptive: the layouts the trainer can run adaptive
context parallelism on (no offload, shards a multiple of 32)."""

import math
from statistics import NormalDist

import pytest

from longctx_operator.planner import PlanError, plan
from support.plans import plan_request

LOG_NORMAL = tuple(round(2000 * math.exp(1.5 * NormalDist().inv_cdf((2 * i + 1) / 512))) for i in range(256))
"""docs/planner.md's example corpus: the 256 quantiles (as `longctx tokenize` records them) of a
log-normal of document lengths, median 2,000 tokens, sigma 1.5 (p99 ~66K, longest ~152K)."""


def request(seq=262_144, nodes=2, fabric="tcp", **changes):
    """llama3-8b, one sequence per step, adaptive on, ring attention, 8 H100 per node."""
    job = dict(
        sequence_length=seq, global_batch_tokens=seq, nodes=nodes, fabric=fabric, attention="ring", adaptive=True
    )
    return plan_request(**{**job, **changes})


def test_adaptive_layouts_never_offload_and_need_shards_of_32():
    """The trainer runs adaptive layouts without offload (contract/config.py): where the fixed
    ring offloads, adaptive takes a layout that fits without it."""
    assert plan(request(1_048_576, 2, "infiniband", adaptive=False)).chosen.offload
    assert not plan(request(1_048_576, 2, "infiniband", document_lengths=LOG_NORMAL)).chosen.offload
    with pytest.raises(PlanError) as e:
        plan(request(8 * 4112, 1, data=1, context=8, tensor=1))
    assert e.value.field == "spec.parallelism.context" and "divisible by 32, got 4112" in e.value.message
