"""What the cluster's administrator lets a job ask of the scheduler: priority classes and
tolerations, under the operator's allow-lists (OperatorConfig.allowedPriorityClasses and
allowedTolerations).

Both reach past the job's own namespace. A priority class decides whom the scheduler preempts
(`system-node-critical` evicts other tenants' pods), and a toleration lets pods onto nodes tainted
for someone else (the control plane, another team's pool). The API cannot know a cluster's classes
and taints, so the operator checks them against its configuration and holds a job that asks for
more Pending, with the field named in its status (reason SettingNotAllowed).
"""

from __future__ import annotations

from .api.spec import LongContextJobSpec
from .config import OperatorConfig


def _allowed(patterns: list[str]) -> str:
    return ", ".join(patterns) or "none"


def refusal(spec: LongContextJobSpec, config: OperatorConfig) -> str | None:
    """Why the job's scheduling settings are not allowed here; None when they are."""
    name = spec.scheduling.priority_class_name
    if name and not config.priority_class_allowed(name):
        return (
            f"spec.scheduling.priorityClassName {name} is not allowed by the operator's allowedPriorityClasses "
            f"({_allowed(config.allowed_priority_classes)})"
        )
    for index, toleration in enumerate(spec.scheduling.tolerations):
        if not config.toleration_allowed(toleration.key):
            return (
                f"spec.scheduling.tolerations[{index}].key {toleration.key} is not allowed by the operator's "
                f"allowedTolerations ({_allowed(config.allowed_tolerations)})"
            )
    return None
