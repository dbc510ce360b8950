"""trainer/contract/events.py: the progress log both trainers write."""

import json

from longctx_trainer.contract.events import emitter, logs_step, step_event


def test_rank_0_prints_each_event_as_one_json_line_and_the_other_ranks_nothing(capsys):
    event = step_event(7, 2.5, 1000.0, None, 0.25)
    emitter(0)(event)
    emitter(1)(event)
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [event]
    assert event == {
        "event": "step",
        "step": 7,
        "loss": 2.5,
        "tokens_per_second": 1000.0,
        "mfu": None,
        "step_seconds": 0.25,
    }


def test_a_step_line_every_log_every_steps_and_for_the_last():
    assert [s for s in range(1, 26) if logs_step(s, 10, 25)] == [10, 20, 25]
    assert [s for s in range(1, 4) if logs_step(s, 1, 3)] == [1, 2, 3]
