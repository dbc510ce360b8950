"""Preemption as the operator sees it: how long a pod gets to save after SIGTERM, and how to tell a
preempted rank from a failed one (the Job's pod failure policy; `observe.latest_preemption` reads
such a rank). Pure; the renderer calls it.

A trainer that receives SIGTERM (a deleted pod, a drain, a Kueue suspension) finishes its step,
agrees with the other ranks on the step to save, writes that checkpoint and exits
PREEMPTED_EXIT_CODE with the step in its termination message (trainer/preemption.py). Not 0: an
Indexed Job counts an index whose pod exits 0 as complete, so a preempted gang would read as
done (and a resumed Job would never restart those indexes). The Job's pod failure policy ignores
that exit code: no failure is counted and the Job controller replaces the pod (after its
recreation backoff, `PER_INDEX_BACKOFF`, or when Kueue admits the Job again), which resumes from
the checkpoint. Any other exit still fails the Job (backoffLimit 0) and the operator restarts the
gang as a new generation.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from longctx_trainer.contract.termination import PREEMPTED_EXIT_CODE

from . import reasons
from .api.spec import LongContextJobSpec
from .api.status import RestartStatus
from .layout import ResolvedLayout
from .model import model_config
from .names import TRAINER_CONTAINER
from .observe import RankPreemption, parse_time
from .reasons import Reason
from .text import printable

CHECKPOINT_BYTES_PER_PARAM = 12
"""What a checkpoint holds per parameter: fp32 weights and Adam's two fp32 moments."""
CHECKPOINT_WRITE_BYTES_PER_SECOND = 1e9
"""Assumed write rate of one node to shared checkpoint storage (a conservative NFS/object store)."""
UNPLANNED_STEP_SECONDS = 60.0
"""Step time assumed where the planner gives none (CPU jobs)."""
GRACE_MARGIN = 2.0
"""The estimate of one step plus one save is doubled ..."""
GRACE_FLOOR_SECONDS = 30
"""... and this much added: the ranks' agreement, orbax's commit and the process exit."""


def grace_period_seconds(spec: LongContextJobSpec, layout: ResolvedLayout) -> int:
    """The pods' terminationGracePeriodSeconds: spec.checkpoint.preemptionGraceSeconds, else room
    for the step in flight and a checkpoint write, from the planner's step time and the model's
    checkpoint size per node."""
    if spec.checkpoint.preemption_grace_seconds is not None:
        return spec.checkpoint.preemption_grace_seconds
    step = layout.step_seconds if layout.step_seconds is not None else UNPLANNED_STEP_SECONDS
    params = model_config(spec.model).param_count()
    write = params * CHECKPOINT_BYTES_PER_PARAM / spec.resources.nodes / CHECKPOINT_WRITE_BYTES_PER_SECOND
    return GRACE_FLOOR_SECONDS + math.ceil(GRACE_MARGIN * (step + write))


POD_FAILURE_POLICY = {
    "rules": [
        {
            "action": "Ignore",
            "onExitCodes": {"containerName": TRAINER_CONTAINER, "operator": "In", "values": [PREEMPTED_EXIT_CODE]},
        }
    ]
}
"""The Job's podFailurePolicy: a preempted rank is not a failure; the Job controller replaces it."""

PER_INDEX_BACKOFF = {"backoffLimitPerIndex": 0, "maxFailedIndexes": 0}
"""The Job's backoff per index. The Job controller waits before it replaces failed pods, ignored
ones included: 10 s doubled per failure, capped at 6 minutes, counted over the whole Job, so a
preempted gang of N ranks waited 10 x 2^(N-1) s (20 s for 2 ranks; 6 minutes from 7). With a
backoff limit per index the wait is per index (10 s for each rank's first preemption) and no
global delay applies (kubernetes pkg/controller/job, `getRemainingTimePerIndex`). Limits 0 keep
every counted failure fatal to the Job, as backoffLimit 0 does."""


def restart_record(reason: Reason, message: str, when: datetime, checkpoint_step: int | None) -> RestartStatus:
    """status.lastRestart: why the gang stopped, when, and the step the next start resumes from."""
    return RestartStatus(
        reason=reason,
        time=when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        message=printable(message),
        checkpoint_step=checkpoint_step,
    )


def is_new_preemption(last: RestartStatus | None, preemption: RankPreemption) -> bool:
    """Whether `preemption` (a pod of the current generation that ended preempted) is one the status
    has not recorded yet: the replaced pods' Failed predecessors stay listed after it is handled."""
    if last is None or last.reason != reasons.PREEMPTED:
        return True
    recorded = parse_time(last.time)
    return preemption.finished is not None and recorded is not None and preemption.finished > recorded


def preempted_since(last: RestartStatus | None) -> datetime | None:
    """When the gang was last preempted in place (its pods restart then: the startup clock's start)."""
    return parse_time(last.time) if last is not None and last.reason == reasons.PREEMPTED else None
