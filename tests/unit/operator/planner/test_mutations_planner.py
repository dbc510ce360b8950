"""The planner's exact tolerance (1e-9, test_planner_worked_example) catches a one-term slip that
the old 1% let through: dropping the fp32 log-sum-exp a ring-attention layer keeps per token
(32 B of 321,568 B per token in the worked example) moves the activations by 9.5e-5 relative.
"""

import pytest

from longctx_operator.planner import costs, plan
from support.plans import WORKED_LAYOUT, plan_request

# The worked example's hand-derived activations (test_planner_worked_example.ACTIVATIONS):
# (layer inputs 262,144 B + one recomputed layer 59,424 B) x 32,768 tokens + the loss chunk.
ACTIVATIONS = (262_144 + 59_424) * 32_768 + 256_512 * 2048


def worked_activations() -> int:
    return plan(plan_request(**WORKED_LAYOUT)).chosen.memory.activations


def test_planner_without_the_log_sum_exp_term_is_caught_only_by_the_exact_tolerance(monkeypatch):
    assert worked_activations() == pytest.approx(ACTIVATIONS, rel=1e-9)
    correct = costs.layer_activation_bytes_per_token
    monkeypatch.setattr(
        costs,
        "layer_activation_bytes_per_token",
        lambda model, precision, tensor: correct(model, precision, tensor) - costs.FP32 * model.heads // tensor,
    )
    mutant = worked_activations()
    assert mutant == pytest.approx(ACTIVATIONS, rel=0.01)  # what the old tolerance accepted
    assert mutant != pytest.approx(ACTIVATIONS, rel=1e-9)
