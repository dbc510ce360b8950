"""The `LongContextJob` status, written by the operator through the status subresource."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .spec import ApiAttentionKind, ApiLoadBalanceKind, ApiModel, ApiRematPolicy

Phase = Literal["Pending", "Admitted", "Starting", "Running", "Restarting", "Succeeded", "Failed", "Suspended"]
PENDING: Phase = "Pending"
ADMITTED: Phase = "Admitted"
STARTING: Phase = "Starting"
RUNNING: Phase = "Running"
RESTARTING: Phase = "Restarting"
SUCCEEDED: Phase = "Succeeded"
FAILED: Phase = "Failed"
SUSPENDED: Phase = "Suspended"
TERMINAL: tuple[Phase, ...] = (SUCCEEDED, FAILED)


class Condition(ApiModel):
    """A Kubernetes-style condition (Admitted, LayoutPlanned, Rendezvous, Running, Restarting, ...)."""

    # str, not conditions.ConditionType (nor reasons.Reason below): an enum in the CRD would make the
    # API server refuse, and this model fail to read, a status another operator version wrote.
    type: str = Field(max_length=64)
    status: Literal["True", "False", "Unknown"]
    reason: str | None = Field(None, max_length=128)
    message: str | None = Field(None, max_length=4096)
    last_transition_time: str | None = None
    """RFC 3339 time of the last change of status."""
    observed_generation: int | None = None


class LayoutStatus(ApiModel):
    """The layout the planner chose (or validated) for the current generation."""

    data: int
    context: int
    tensor: int
    processes_per_node: int
    processes: int
    """Total JAX processes in the gang."""
    offload: bool
    chunk_tokens: int | None = None
    attention: ApiAttentionKind | None = None
    """The attention kind the trainer runs (the planner's choice under attention: auto)."""
    ulysses: int | None = None
    """The Ulysses group size of attention hybrid (the planner's choice unless the spec set it)."""
    load_balance: ApiLoadBalanceKind | None = None
    """The load balancing the trainer runs (what loadBalance auto resolved to: documents with
    data.packing.documentMask, else dualChunkSwap)."""
    remat_policy: ApiRematPolicy | None = None
    """What each layer keeps for its backward, the planner's choice: saveAttention (attention's
    output and residuals, so the backward never reruns attention's forward) where it fits in
    memory, else full (the layer's input only)."""
    memory_per_gpu: str | None = None
    """Planned device memory per GPU, e.g. 61.2Gi."""
    estimated_tokens_per_second: float | None = None
    """The planner's estimate for this layout; status.progress.tokensPerSecond is the measured rate."""
    explanation: str | None = Field(None, max_length=1024)
    """Why this layout: the planner's choice among the layouts that fit (e.g. "fastest of 12 fitting
    layouts and attention kinds (auto)"), or that the spec's manual layout was validated or, on
    CPU, taken as written."""


class WorkersStatus(ApiModel):
    total: int = 0
    ready: int = 0
    failed: int = 0
    succeeded: int = 0


class ProgressStatus(ApiModel):
    """Live training progress read from rank 0's metrics endpoint."""

    step: int | None = None
    tokens_per_second: float | None = None
    mfu: float | None = None
    """Model FLOPs utilisation (causal convention), 0..1."""
    loss: float | None = None
    last_checkpoint_step: int | None = None
    percent_complete: float | None = None
    """step / spec.steps, in percent (one decimal)."""
    eta: str | None = None
    """Time left at the recent step rate (steps over the last five minutes of reads since the
    last restart), e.g. "1h12m"; absent until two reads show progress."""
    estimated_completion_time: str | None = None
    """When the job finishes at that rate (RFC 3339)."""
    updated_at: str | None = None
    resumed_from_step: int | None = None
    """The checkpoint step the running ranks resumed from (0: from scratch)."""
    last_checkpoint_time: str | None = None
    """When the latest checkpoint was written (RFC 3339); its age is the work a failure would lose."""
    in_place_restarts: int | None = Field(None, ge=0)
    """In-place restarts of the current generation (restartPolicy.inPlace: the trainers restarted
    inside the same pods, not counted in restarts), as rank 0's trainer reports them; at most
    restartPolicy.maxInPlaceRestarts. Absent for a trainer that does not report them (inPlace off);
    a new generation's trainers start again at 0. An Event RestartedInPlace marks each rise."""


class RestartStatus(ApiModel):
    """The last time the gang stopped and started again, and why."""

    reason: str = Field(max_length=128)
    """RankFailed or StartupTimeout (a gang restart, counted), Preempted (a rank got SIGTERM and every
    rank saved; the same Job replaces the pods) or EvictedByKueue (Kueue suspended the same Job)."""
    time: str
    message: str | None = Field(None, max_length=4096)
    checkpoint_step: int | None = None
    """The checkpoint the next start resumes from, as last seen (the preemption's own step when the
    ranks saved on SIGTERM)."""


class LongContextJobStatus(ApiModel):
    phase: Phase | None = None
    reason: str | None = Field(None, max_length=128)
    """Machine-readable reason for the phase."""
    message: str | None = Field(None, max_length=4096)
    """Human-readable explanation of the phase."""
    conditions: list[Condition] = Field(default_factory=list, max_length=32)
    layout: LayoutStatus | None = None
    workers: WorkersStatus | None = None
    restarts: int = 0
    """Gang restarts so far."""
    stall_restarts: int = 0
    """Gang restarts for a stall (or a straggler, with restartPolicy.onStraggler) so far, counted
    apart from restarts."""
    workload_generation: int | None = None
    """Generation of the workload (incremented on every gang restart)."""
    current_workload: str | None = None
    """Name of the current Job."""
    start_time: str | None = None
    completion_time: str | None = None
    observed_generation: int | None = None
    progress: ProgressStatus | None = None
    last_restart: RestartStatus | None = None
