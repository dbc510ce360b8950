"""Admission of the next generation: nothing is created unless the whole gang is admitted, the
layout planned and the operator's allow-lists and admission policy accept the job."""

from __future__ import annotations

from collections.abc import Callable

from .. import conditions, names, reasons
from ..admission import Admission
from ..api.spec import LongContextJobSpec
from ..api.status import ADMITTED, PENDING
from ..layout import ResolvedLayout
from .decision import CreateWorkload, Decision
from .draft import Draft
from .kueue import queued_message

ADMISSION_RETRY_SECONDS = 5.0


def _hold(
    n: Draft, kind: conditions.ConditionType, reason: reasons.Reason, message: str, retry: float | None = None
) -> Decision:
    """Pending for `reason`: until the spec (or the operator's configuration) changes, or `retry`."""
    n.set(phase=PENDING, reason=reason, message=message)
    n.condition(kind, False, reason, message)
    return n.decision(requeue_after=retry)


def admit_next(
    n: Draft,
    spec: LongContextJobSpec,
    job_name: str,
    admit: Callable[[], Admission],
    planned: bool,
    pod_annotations_error: str | None,
    admission_error: str | None,
    settings_error: str | None,
    network_error: str | None,
) -> Decision:
    """Admission of the next generation; creates nothing unless the whole gang is admitted."""
    if not planned:
        return n.fail(
            reasons.PLAN_FAILED, next(c.message for c in n.status.conditions if c.type == conditions.LAYOUT_PLANNED)
        )
    if settings_error is not None:  # waits for the spec (or the operator's allow-lists) to change
        return _hold(n, conditions.ADMITTED, reasons.SETTING_NOT_ALLOWED, settings_error)
    if network_error is not None:  # waits for the spec or the operator's networkAllowList to change
        return _hold(n, conditions.ADMITTED, reasons.NETWORK_NOT_ALLOWED, network_error)
    if pod_annotations_error is not None:  # waits for the job's annotation to change
        return _hold(n, conditions.POD_ANNOTATIONS_ACCEPTED, reasons.POD_ANNOTATIONS_REJECTED, pod_annotations_error)
    if n.has(conditions.POD_ANNOTATIONS_ACCEPTED):
        n.condition(
            conditions.POD_ANNOTATIONS_ACCEPTED,
            True,
            reasons.POD_ANNOTATIONS_ACCEPTED,
            "the pod annotations are allowed",
        )
    if admission_error is not None:  # the operator's admission policy; waits for the spec to change
        return _hold(n, conditions.ADMITTED, reasons.ADMISSION_NOT_ALLOWED, admission_error)
    mode = spec.scheduling.admission
    if mode == "builtin":
        verdict = admit()
        if not verdict.fits:
            return _hold(n, conditions.ADMITTED, verdict.reason, verdict.message, ADMISSION_RETRY_SECONDS)
        admitted, reason, message = True, verdict.reason, verdict.message
    elif mode == "kueue":
        admitted, reason, message = False, reasons.QUEUED_IN_KUEUE, queued_message(spec)
    else:
        admitted, reason, message = True, reasons.ADMISSION_DISABLED, "scheduling.admission is none"
    generation = (n.status.workload_generation or 0) + 1
    n.set(
        phase=ADMITTED if admitted else PENDING,
        reason=reason,
        message=message,
        workload_generation=generation,
        current_workload=names.workload_name(job_name, generation),
        workers=None,
    )
    n.condition(conditions.ADMITTED, admitted, reason, message)
    n.restart_clock(conditions.WORKLOAD_CREATED)  # a new generation's create has its own history and clock
    n.actions.append(CreateWorkload(generation, ResolvedLayout.from_status(n.status.layout, spec)))
    return n.decision(requeue_after=float(spec.scheduling.startup_timeout_seconds))
