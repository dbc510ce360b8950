"""tests/support/recovery.py: the stages of a recovery from recorded objects and log lines."""

from datetime import UTC, datetime

from support.recovery import breakdown, in_place_breakdown, log_events, preemption_breakdown, table

POD = {
    "status": {
        "conditions": [{"type": "PodScheduled", "lastTransitionTime": "2026-11-26T23:00:52Z"}],
        "containerStatuses": [
            {"name": "trainer", "state": {"terminated": {"startedAt": "2026-11-26T23:00:55Z", "exitCode": 0}}}
        ],
    }
}
RANK0 = "\n".join(
    [
        '2026-11-26T23:01:05.500000000Z {"event": "joined", "rank": 0}',
        "2026-11-26T23:01:06.000000000Z a library's own line",
        '2026-11-26T23:01:10.250000000Z {"event": "resume", "step": 10}',
        '2026-11-26T23:01:14.250000000Z {"event": "compiled", "seconds": 4.0, "from_cache": true}',
        '2026-11-26T23:01:20.250000000Z {"event": "step", "step": 11}',
    ]
)
RANK1 = '2026-11-26T23:01:07.000000000Z {"event": "joined", "rank": 1}'


def test_each_stage_runs_from_the_end_of_the_one_before():
    status = {"lastRestart": {"time": "2026-11-26T23:00:45Z"}}
    workload = {"metadata": {"creationTimestamp": "2026-11-26T23:00:50Z"}}
    failed = datetime(2026, 11, 26, 23, 0, 0, tzinfo=UTC)
    seconds = breakdown(failed, status, workload, [POD, POD], [RANK0, RANK1])
    assert seconds == {
        "detect": 45.0,
        "delete": 5.0,
        "schedule": 2.0,
        "start": 3.0,
        "rendezvous": 12.0,  # the last rank's "joined"
        "restore": 3.2,
        "compile": 4.0,
        "first step": 6.0,
    }
    assert table(seconds).endswith("| **total** | **80 s** |")


def test_log_lines_other_than_the_trainers_events_are_skipped():
    assert [e["event"] for _, e in log_events(RANK0)] == ["joined", "resume", "compiled", "step"]


def test_a_preemption_in_place_saves_then_stops_before_the_new_pods_start():
    old_rank0 = {
        "status": {
            "containerStatuses": [
                {"name": "trainer", "state": {"terminated": {"exitCode": 85, "finishedAt": "2026-11-26T23:00:40Z"}}}
            ]
        }
    }
    old_log = '2026-11-26T23:00:30.000000000Z {"event": "preempted", "step": 10}'
    deleted = datetime(2026, 11, 26, 23, 0, 20, tzinfo=UTC)
    seconds = preemption_breakdown(deleted, old_rank0, old_log, [POD, POD], [RANK0, RANK1])
    assert seconds == {
        "save": 10.0,  # the step finished, agreed on and saved
        "stop": 10.0,  # rank 0's old trainer ended
        "schedule": 12.0,
        "start": 3.0,
        "rendezvous": 12.0,
        "restore": 3.2,
        "compile": 4.0,
        "first step": 6.0,
    }


def test_an_in_place_restart_agrees_stops_and_starts_the_trainers_again_in_the_same_logs():
    crash = "exiting 3 after step 7"
    rank0 = "\n".join(
        [
            '2026-11-26T23:00:01.000000000Z {"event": "joined", "rank": 0}',
            '2026-11-26T23:00:09.000000000Z {"event": "step", "step": 7}',
            "2026-11-26T23:00:10.500000000Z longctx_trainer.launch: in-place restart 1: rank 1 failed with exit "
            "code 3; stopping this pod's 1 trainer process(es)",
            "2026-11-26T23:00:11.000000000Z longctx_trainer.launch: in-place restart 1: starting this pod's "
            "trainer process(es) again",
            '2026-11-26T23:00:15.000000000Z {"event": "joined", "rank": 0}',
            '2026-11-26T23:00:16.000000000Z {"event": "resume", "step": 5}',
            '2026-11-26T23:00:18.000000000Z {"event": "compiled", "seconds": 2.0, "from_cache": true}',
            '2026-11-26T23:00:30.000000000Z {"event": "step", "step": 6}',
        ]
    )
    rank1 = "\n".join(
        [
            '2026-11-26T23:00:01.500000000Z {"event": "joined", "rank": 1}',
            f"2026-11-26T23:00:10.000000000Z longctx_trainer: LONGCTX_FAULT_EXIT_AT_STEP: {crash}",
            "2026-11-26T23:00:10.250000000Z longctx_trainer.launch: in-place restart 1: rank 1 failed with exit "
            "code 3; stopping this pod's 1 trainer process(es)",
            "2026-11-26T23:00:12.000000000Z longctx_trainer.launch: in-place restart 1: starting this pod's "
            "trainer process(es) again",
            '2026-11-26T23:00:14.000000000Z {"event": "joined", "rank": 1}',
        ]
    )
    assert in_place_breakdown(crash, [rank0, rank1]) == {
        "agree": 0.5,  # the crash to the last launcher's "stopping"
        "stop": 1.5,  # to the last "starting ... again"
        "rendezvous": 3.0,  # the last second-epoch "joined", not the first epoch's
        "restore": 1.0,
        "compile": 2.0,
        "first step": 12.0,
    }
