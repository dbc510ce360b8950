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
    "QueuedInKueue",
    "AdmittedByKueue",
    "EvictedByKueue",
    "NetworkNotAllowed",
    "PodAnnotationsAccepted",
    "PodAnnotationsRejected",
    "Created",
    "WorkloadCreateFailed",
    "RanksStarting",
    "AllRanksRunning",
    "AllRanksReady",
    "RankFailed",
    "StartupTimeout",
    "Recovered",
    "Completed",
    "Suspended",
    "Resumed",
    "CheckpointNotPersistent",
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
QUEUED_IN_KUEUE: Reason = "QueuedInKueue"
ADMITTED_BY_KUEUE: Reason = "AdmittedByKueue"
EVICTED_BY_KUEUE: Reason = "EvictedByKueue"
# Admitted False: the fabric or a secondary network is outside the operator's networkAllowList
NETWORK_NOT_ALLOWED: Reason = "NetworkNotAllowed"
# PodAnnotationsAccepted
POD_ANNOTATIONS_ACCEPTED: Reason = "PodAnnotationsAccepted"
POD_ANNOTATIONS_REJECTED: Reason = "PodAnnotationsRejected"
# WorkloadCreated
CREATED: Reason = "Created"
WORKLOAD_CREATE_FAILED: Reason = "WorkloadCreateFailed"
# Starting (status.reason only), Running, Rendezvous
RANKS_STARTING: Reason = "RanksStarting"
ALL_RANKS_RUNNING: Reason = "AllRanksRunning"
ALL_RANKS_READY: Reason = "AllRanksReady"
# Restarting, Failed
RANK_FAILED: Reason = "RankFailed"
STARTUP_TIMEOUT: Reason = "StartupTimeout"
RECOVERED: Reason = "Recovered"
# Succeeded
COMPLETED: Reason = "Completed"
# Suspended
SUSPENDED: Reason = "Suspended"
RESUMED: Reason = "Resumed"
# Events only: a finding of api/advice.py
CHECKPOINT_NOT_PERSISTENT: Reason = "CheckpointNotPersistent"
