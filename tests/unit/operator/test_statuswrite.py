"""operator/statuswrite.py: which decided statuses are written now, later, or not at all."""

import pytest

from longctx_operator.api.status import Condition, LongContextJobStatus, WorkersStatus
from longctx_operator.lifecycle.decision import Decision, DeleteWorkload, Event
from longctx_operator.statuswrite import WORKERS_WRITE_SECONDS, write_delay

STARTING = LongContextJobStatus(
    phase="Starting",
    reason="RanksStarting",
    message="1 of 8 ranks Running",
    workload_generation=1,
    current_workload="j-g1",
    workers=WorkersStatus(total=8, ready=1),
)

ADMITTED = LongContextJobStatus(phase="Admitted", reason="GangFits", workload_generation=1, current_workload="j-g1")


def ready(n: int) -> LongContextJobStatus:
    return STARTING.model_copy(update={"workers": WorkersStatus(total=8, ready=n)})


def test_a_status_equal_to_the_written_one_is_not_written():
    assert write_delay(STARTING, Decision(ready(1)), None, now=100.0) is None
    assert write_delay(STARTING, Decision(ready(1)), 99.0, now=100.0) is None  # counts came back


def test_a_change_of_the_counts_alone_waits_for_the_changes_after_it_then_is_written():
    assert write_delay(STARTING, Decision(ready(2)), None, now=100.0) == WORKERS_WRITE_SECONDS
    assert write_delay(STARTING, Decision(ready(3)), 100.0, now=101.5) == pytest.approx(WORKERS_WRITE_SECONDS - 1.5)
    assert write_delay(STARTING, Decision(ready(4)), 100.0, now=100.0 + WORKERS_WRITE_SECONDS) == 0.0
    assert write_delay(STARTING, Decision(ready(4)), 100.0, now=110.0) == 0.0
    assert write_delay(STARTING.model_copy(update={"workers": None}), Decision(ready(0)), None, 0.0) > 0  # first counts


def test_any_other_change_is_written_at_once_with_the_counts_that_waited():
    running = ready(8).model_copy(update={"phase": "Running", "reason": "AllRanksRunning"})
    assert write_delay(STARTING, Decision(running), 100.0, now=100.5) == 0.0
    condition = Condition(type="Running", status="True", reason="AllRanksRunning")
    assert write_delay(STARTING, Decision(ready(2).model_copy(update={"conditions": [condition]})), None, 0.0) == 0.0
    assert write_delay(STARTING, Decision(STARTING.model_copy(update={"message": "2 of 8"})), None, 0.0) == 0.0


def test_the_move_to_starting_waits_like_the_counts_and_carries_the_latest_message():
    assert write_delay(ADMITTED, Decision(STARTING), None, now=100.0) == WORKERS_WRITE_SECONDS
    assert write_delay(ADMITTED, Decision(STARTING.model_copy(update={"message": "5 of 8"})), 100.0, 101.0) == 1.0
    assert write_delay(ADMITTED, Decision(STARTING), 100.0, now=100.0 + WORKERS_WRITE_SECONDS) == 0.0
    restarting = ADMITTED.model_copy(update={"phase": "Restarting"})
    assert write_delay(restarting, Decision(STARTING), None, now=100.0) == WORKERS_WRITE_SECONDS


def test_a_move_to_starting_with_any_other_change_is_written_at_once():
    condition = Condition(type="WorkloadCreated", status="True", reason="Created")
    assert write_delay(ADMITTED, Decision(STARTING.model_copy(update={"conditions": [condition]})), None, 0.0) == 0.0
    assert write_delay(ADMITTED, Decision(STARTING.model_copy(update={"restarts": 1})), None, 0.0) == 0.0
    assert write_delay(ADMITTED, Decision(STARTING, events=(Event("Normal", "Planned", "x"),)), None, 0.0) == 0.0
    running = STARTING.model_copy(update={"phase": "Running", "reason": "AllRanksRunning"})
    assert write_delay(ADMITTED, Decision(running), None, 0.0) == 0.0
    preempted = STARTING.model_copy(update={"reason": "Preempted"})
    assert write_delay(ADMITTED.model_copy(update={"phase": "Running"}), Decision(preempted), None, 0.0) == 0.0


def test_counts_with_an_event_or_an_action_are_written_at_once():
    """An Event tells the status written; an action comes after the status it follows from."""
    assert write_delay(STARTING, Decision(ready(2), events=(Event("Normal", "Planned", "x"),)), None, 0.0) == 0.0
    assert write_delay(STARTING, Decision(ready(2), actions=(DeleteWorkload(1, "uid"),)), None, 0.0) == 0.0
