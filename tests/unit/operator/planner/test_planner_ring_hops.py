"""The planner's ring bandwidth from the ring's hops across nodes (operator/planner/timing.py,
contract/topology.py): a ring step waits for its slowest hop, in every data group's ring."""

from longctx_operator.planner import plan
from longctx_trainer.contract.presets import PRESETS
from support.plans import plan_request

# 24 GPUs as data 8 x context 3: each ring is three consecutive GPUs.
SEQUENCE = 6 * 8192


def ring_exposed(nodes: int, gpus_per_node: int) -> float:
    request = plan_request(
        model=PRESETS["1b"],
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        data=8,
        context=3,
        tensor=1,
        sequence_length=SEQUENCE,
        global_batch_tokens=8 * SEQUENCE,
        fabric="tcp",
        remat_policy="full",
    )
    return plan(request).chosen.step.ring_exposed


def test_a_ring_that_straddles_two_nodes_pays_the_fabric():
    """On 8 GPUs per node the rings of data groups 2 and 5 (GPUs 6-8, 15-17) cross a node
    boundary twice each, although 3 GPUs fit in a node; on 6 GPUs per node every ring stays on
    NVLink. (The planner used to ask only whether context x tensor fits in a node: NVLink both.)"""
    straddling, inside = ring_exposed(3, 8), ring_exposed(4, 6)
    assert straddling > 10 * inside and straddling > 1.0, (straddling, inside)
