"""The reasons the operator writes, in one place: status.reason (why the phase), the reason of each
condition and of each Event (a condition's Event carries its reason; advice has its own). They are
wire values (`kubectl get events --field-selector reason=...`, users' alert rules and scripts):
never rename one. docs/operator.md and the chart's notes are tied to them by tests/unit/operator/test_conditions.py."""

from typing import Literal

Reason = Literal[
    "Planned",
    "PlanFailed",
    "GangFits",
    "NoGPUsRequested",
    "InsufficientGPUs",
    "NodesNotReadable",
    "AdmissionDisabled",
    "AdmissionNotAllowed",
    "QueuedInKueue",
    "AdmittedByKueue",
    "EvictedByKueue",
    "SettingNotAllowed",
    "NetworkNotAllowed",
    "PodAnnotationsAccepted",
    "PodAnnotationsRejected",
    "Created",
    "WorkloadCreateFailed",
    "NameTaken",
    "RanksStarting",
    "AllRanksRunning",
    "AllRanksReady",
    "RankFailed",
    "StartupTimeout",
    "Recovered",
    "Preempted",
    "Completed",
    "Suspended",
    "Resumed",
    "CheckpointNotPersistent",
    "Stalled",
    "StragglerDetected",
    "NoStraggler",
    "NodeNotReady",
    "RestartedInPlace",
]

# LayoutPlanned
PLANNED: Reason = "Planned"
PLAN_FAILED: Reason = "PlanFailed"
# Admitted: builtin admission (admission.py, reconciler.py), then scheduling.admission none and kueue
GANG_FITS: Reason = "GangFits"
NO_GPUS_REQUESTED: Reason = "NoGPUsRequested"
INSUFFICIENT_GPUS: Reason = "InsufficientGPUs"
NODES_NOT_READABLE: Reason = "NodesNotReadable"
ADMISSION_DISABLED: Reason = "AdmissionDisabled"
ADMISSION_NOT_ALLOWED: Reason = "AdmissionNotAllowed"
QUEUED_IN_KUEUE: Reason = "QueuedInKueue"
ADMITTED_BY_KUEUE: Reason = "AdmittedByKueue"
EVICTED_BY_KUEUE: Reason = "EvictedByKueue"
SETTING_NOT_ALLOWED: Reason = "SettingNotAllowed"
"""A priority class or toleration outside the operator's allow-lists (policy.py)."""
NETWORK_NOT_ALLOWED: Reason = "NetworkNotAllowed"
"""The fabric or a secondary network outside the operator's networkAllowList (config.py)."""
# PodAnnotationsAccepted
POD_ANNOTATIONS_ACCEPTED: Reason = "PodAnnotationsAccepted"
POD_ANNOTATIONS_REJECTED: Reason = "PodAnnotationsRejected"
# WorkloadCreated
CREATED: Reason = "Created"
WORKLOAD_CREATE_FAILED: Reason = "WorkloadCreateFailed"
NAME_TAKEN: Reason = "NameTaken"
# Starting (status.reason only), Running, Rendezvous
RANKS_STARTING: Reason = "RanksStarting"
ALL_RANKS_RUNNING: Reason = "AllRanksRunning"
ALL_RANKS_READY: Reason = "AllRanksReady"
# Restarting, Failed
RANK_FAILED: Reason = "RankFailed"
STARTUP_TIMEOUT: Reason = "StartupTimeout"
RECOVERED: Reason = "Recovered"
# Stalled (and Restarting, Failed): hang detection (stall.py); Straggler (straggler.py)
STALLED: Reason = "Stalled"
STRAGGLER_DETECTED: Reason = "StragglerDetected"
NO_STRAGGLER: Reason = "NoStraggler"
# Restarting, Failed: a rank's node is lost (NotReady, or the pod marked for disruption)
NODE_NOT_READY: Reason = "NodeNotReady"
PREEMPTED: Reason = "Preempted"
"""A rank got SIGTERM, every rank saved one step and the Job replaces the pods (no restart counted)."""
# Succeeded
COMPLETED: Reason = "Completed"
# Suspended
SUSPENDED: Reason = "Suspended"
RESUMED: Reason = "Resumed"
# Events only: a finding of api/advice.py
CHECKPOINT_NOT_PERSISTENT: Reason = "CheckpointNotPersistent"
# Events only: the progress read of rank 0 (inplace_restarts.py)
RESTARTED_IN_PLACE: Reason = "RestartedInPlace"
"""Rank 0's trainer reports more in-place restarts (restartPolicy.inPlace) than the status showed."""
