"""lifecycle.admit: the next generation is created only when the gang is admitted and the operator allows the job."""

from datetime import timedelta

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.lifecycle.admit import ADMISSION_RETRY_SECONDS
from longctx_operator.lifecycle.decide import decide
from longctx_operator.lifecycle.decision import CreateWorkload
from longctx_operator.observe import MISSING
from support.lifecycle import FITS, NO_FIT, T0, conditions, spec, step


def test_new_job_is_planned_admitted_and_created():
    d, asked = step(spec(), LongContextJobStatus())
    assert asked
    assert d.status.phase == "Admitted"
    assert (d.status.workload_generation, d.status.current_workload) == (1, "job-g1")
    assert (
        d.status.layout.processes == 2 and d.status.layout.data * d.status.layout.context * d.status.layout.tensor == 16
    )
    assert conditions(d.status) == {
        cond.LAYOUT_PLANNED: ("True", reasons.PLANNED),
        cond.ADMITTED: ("True", reasons.GANG_FITS),
    }
    assert d.actions == (CreateWorkload(1, d.actions[0].layout),)
    assert [e.reason for e in d.events] == [reasons.PLANNED, reasons.GANG_FITS]
    assert d.status.observed_generation == 1


def test_no_room_stays_pending_and_creates_nothing():
    d, _ = step(spec(), LongContextJobStatus(), admission=NO_FIT)
    assert (d.status.phase, d.status.reason) == ("Pending", reasons.INSUFFICIENT_GPUS)
    assert d.status.message == NO_FIT.message and d.actions == ()
    assert d.requeue_after == ADMISSION_RETRY_SECONDS
    assert d.events[-1].type == "Warning"
    again, _ = step(spec(), d.status, now=T0 + timedelta(seconds=5), admission=NO_FIT)
    assert again.events == () and again.actions == ()
    later, _ = step(spec(), again.status, now=T0 + timedelta(seconds=10))
    assert later.status.phase == "Admitted" and later.actions[0].generation == 1


def test_a_setting_the_operator_does_not_allow_holds_the_job_pending():
    why = "spec.scheduling.priorityClassName system-node-critical is not allowed by the operator's ..."
    held = decide("job", spec(), 1, LongContextJobStatus(), MISSING, T0, lambda: FITS, settings_error=why)
    assert (held.status.phase, held.status.reason, held.status.message) == ("Pending", reasons.SETTING_NOT_ALLOWED, why)
    assert held.actions == () and held.requeue_after is None
    assert conditions(held.status)[cond.ADMITTED] == ("False", reasons.SETTING_NOT_ALLOWED)
    assert ("Warning", reasons.SETTING_NOT_ALLOWED) in [(e.type, e.reason) for e in held.events]
    allowed, _ = step(spec(), held.status)
    assert allowed.status.phase == "Admitted" and allowed.actions[0].generation == 1


def test_an_admission_mode_the_operator_refuses_holds_the_job_with_its_reason():
    why = "scheduling.admission none is not allowed by this operator's configuration (admissionModes: kueue)"
    d = decide("job", spec(), 1, LongContextJobStatus(), MISSING, T0, lambda: FITS, admission_error=why)
    assert d.actions == () and (d.status.phase, d.status.reason, d.status.message) == (
        "Pending",
        reasons.ADMISSION_NOT_ALLOWED,
        why,
    )
    assert conditions(d.status)[cond.ADMITTED] == ("False", reasons.ADMISSION_NOT_ALLOWED)
    assert ("Warning", reasons.ADMISSION_NOT_ALLOWED) in [(e.type, e.reason) for e in d.events]
    allowed = decide("job", spec(), 2, d.status, MISSING, T0, lambda: FITS)
    assert allowed.status.phase == "Admitted" and allowed.actions[0].generation == 1


def test_admission_none_creates_at_once():
    d, asked = step(spec(scheduling={"admission": "none"}), LongContextJobStatus())
    assert not asked and d.status.phase == "Admitted" and d.actions[0].generation == 1


def test_a_network_outside_the_allow_list_holds_the_job_and_creates_nothing():
    s = spec()
    why = 'spec.network.networks[0]: "vpc0" is not allowed in namespace team'
    held = decide("job", s, 1, LongContextJobStatus(), MISSING, T0, lambda: FITS, network_error=why)
    assert held.actions == () and held.requeue_after is None  # waits for the spec or the allow-list
    assert (held.status.phase, held.status.reason, held.status.message) == ("Pending", reasons.NETWORK_NOT_ALLOWED, why)
    assert conditions(held.status)[cond.ADMITTED] == ("False", reasons.NETWORK_NOT_ALLOWED)
    assert ("Warning", reasons.NETWORK_NOT_ALLOWED, why) in [(e.type, e.reason, e.message) for e in held.events]
    again = decide("job", s, 1, held.status, MISSING, T0 + timedelta(seconds=5), lambda: FITS, network_error=why)
    assert again.events == () and again.actions == ()  # no Event storm while it waits
    allowed, asked = step(s, again.status, now=T0 + timedelta(seconds=9))
    assert asked and allowed.actions and conditions(allowed.status)[cond.ADMITTED] == ("True", reasons.GANG_FITS)
