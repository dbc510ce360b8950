"""policy.py: a job's priority class and tolerations under the operator's allow-lists."""

import pytest

from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.config import OperatorConfig
from longctx_operator.policy import refusal

ALLOWING = OperatorConfig(allowed_priority_classes=["training-*"], allowed_tolerations=["example.com/*"])


def spec(**scheduling) -> LongContextJobSpec:
    return LongContextJobSpec.model_validate(
        {"model": {"preset": "tiny"}, "sequenceLength": 4096, "scheduling": scheduling}
    )


def test_a_job_asking_for_nothing_is_allowed_everywhere():
    assert refusal(spec(), OperatorConfig()) is None


@pytest.mark.parametrize(
    "scheduling, field",
    [
        ({"priorityClassName": "system-node-critical"}, "spec.scheduling.priorityClassName"),
        ({"priorityClassName": "training-high"}, "spec.scheduling.priorityClassName"),
        (
            {"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}]},
            "spec.scheduling.tolerations[0].key",
        ),
    ],
)
def test_nothing_is_allowed_by_default(scheduling, field):
    why = refusal(spec(**scheduling), OperatorConfig())
    assert why is not None and why.startswith(field) and "(none)" in why


def test_the_allow_lists_admit_their_patterns_only():
    allowed = spec(priorityClassName="training-high", tolerations=[{"key": "example.com/pool", "operator": "Exists"}])
    assert refusal(allowed, ALLOWING) is None
    why = refusal(spec(priorityClassName="system-node-critical"), ALLOWING)
    assert "system-node-critical" in why and "allowedPriorityClasses (training-*)" in why
    tolerations = [{"key": "example.com/pool", "operator": "Exists"}, {"key": "node.kubernetes.io/unschedulable"}]
    why = refusal(spec(tolerations=tolerations), ALLOWING)
    assert why.startswith("spec.scheduling.tolerations[1].key node.kubernetes.io/unschedulable")
