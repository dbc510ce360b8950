"""lifecycle.startup: a gang not all Running within scheduling.startupTimeoutSeconds counts as a failure."""

from datetime import timedelta

import pytest

from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.decision import DeleteWorkload
from longctx_operator.observe import WorkloadObservation
from support.lifecycle import T0, UID, spec, step


def test_startup_timeout_counts_as_a_failure():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    pending = WorkloadObservation(exists=True, uid=UID, created=T0, total=2, running=1)
    waiting, _ = step(s, admitted.status, pending, now=T0 + timedelta(seconds=50))
    assert waiting.actions == () and waiting.requeue_after == pytest.approx(10.5)
    late, _ = step(s, waiting.status, pending, now=T0 + timedelta(seconds=61))
    assert late.actions == (DeleteWorkload(1, UID, broken=True),)
    assert (late.status.phase, late.status.reason) == ("Restarting", reasons.STARTUP_TIMEOUT)
    assert "1 of 2 ranks Running after 60s" in late.status.message
