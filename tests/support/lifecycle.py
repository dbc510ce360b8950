"""lifecycle.decide step by step for the tests of the lifecycle's policies (tests/unit/operator/lifecycle):
a job spec changed by keyword, observations, and one step of `decide`."""

from __future__ import annotations

from datetime import UTC, datetime

from longctx_operator import reasons
from longctx_operator.admission import Admission
from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.decide import decide
from longctx_operator.observe import MISSING, WorkloadObservation

T0 = datetime(2026, 1, 1, tzinfo=UTC)
UID = "job-g1-uid"
FITS = Admission(True, reasons.GANG_FITS, "2 of 4 free nodes")
NO_FIT = Admission(False, reasons.INSUFFICIENT_GPUS, "the gang needs 2 nodes; 1 available")


def spec(**over) -> LongContextJobSpec:
    base = {
        "model": {"preset": "tiny"},
        "sequenceLength": 4096,
        "steps": 10,
        "resources": {"nodes": 2, "gpusPerNode": 8, "gpuType": "h100-80gb"},
        "restartPolicy": {"maxRestarts": 1, "backoffSeconds": 10},
        "checkpoint": {"persistentVolumeClaim": "shared"},
        "scheduling": {"startupTimeoutSeconds": 60},
    }
    for key, value in over.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return LongContextJobSpec.model_validate(base)


def running(total=2, ready=2, created=T0):
    return WorkloadObservation(exists=True, uid=UID, created=created, total=total, running=total, ready=ready)


def step(s, status, observed=MISSING, now=T0, admission=FITS, spec_generation=1):
    asked = []

    def admit():
        asked.append(True)
        return admission

    decision = decide("job", s, spec_generation, status, observed, now, admit)
    return decision, bool(asked)


def conditions(status):
    return {c.type: (c.status, c.reason) for c in status.conditions}


def decide_with(s, status, health, observed=None, now=T0):
    return decide("job", s, 1, status, observed or running(), now, lambda: None, health=health)


def running_status(s):
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    assert run.status.phase == "Running"
    return run.status
