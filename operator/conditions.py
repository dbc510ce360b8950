"""The condition types of a LongContextJob's status.conditions, in one place. They are wire values
(`kubectl wait --for=condition=...`, users' scripts): never rename one. Their reasons are in
reasons.py; docs/operator.md's condition table is tied to both by tests/unit/operator/test_conditions.py."""

from typing import Literal

ConditionType = Literal[
    "LayoutPlanned",
    "Admitted",
    "WorkloadCreated",
    "PodAnnotationsAccepted",
    "Running",
    "Rendezvous",
    "Restarting",
    "Stalled",
    "Straggler",
    "Suspended",
    "Succeeded",
    "Failed",
]

LAYOUT_PLANNED: ConditionType = "LayoutPlanned"
ADMITTED: ConditionType = "Admitted"
WORKLOAD_CREATED: ConditionType = "WorkloadCreated"
"""Set only once a create was refused."""
POD_ANNOTATIONS_ACCEPTED: ConditionType = "PodAnnotationsAccepted"
"""Set only once the job's pod annotations were refused."""
RUNNING: ConditionType = "Running"
RENDEZVOUS: ConditionType = "Rendezvous"
"""All ranks Ready."""
RESTARTING: ConditionType = "Restarting"
STALLED: ConditionType = "Stalled"
"""No rank advanced within the hang bound (its message names the ranks that stopped)."""
STRAGGLER: ConditionType = "Straggler"
"""A rank's step time stays above the gang's median (its message names rank, pod and node)."""
SUSPENDED: ConditionType = "Suspended"
SUCCEEDED: ConditionType = "Succeeded"
FAILED: ConditionType = "Failed"
