"""lifecycle.suspend: spec.suspend deletes the workload; unsuspending creates the next generation."""

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.decision import CreateWorkload, DeleteWorkload
from longctx_operator.observe import MISSING
from support.lifecycle import UID, conditions, running, spec, step


def test_suspend_deletes_and_resume_creates_the_next_generation():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    suspended, _ = step(spec(suspend=True), run.status, running(), spec_generation=2)
    assert suspended.actions == (DeleteWorkload(1, UID),)
    assert suspended.status.phase == "Suspended" and suspended.status.current_workload is None
    assert conditions(suspended.status)[cond.RUNNING] == ("False", reasons.SUSPENDED)
    still, _ = step(spec(suspend=True), suspended.status, MISSING, spec_generation=2)
    assert still.actions == () and still.events == ()
    resumed, _ = step(s, still.status, MISSING, spec_generation=3)
    assert resumed.actions == (CreateWorkload(2, admitted.actions[0].layout),)
    assert resumed.status.restarts == 0 and conditions(resumed.status)[cond.SUSPENDED] == ("False", reasons.RESUMED)
