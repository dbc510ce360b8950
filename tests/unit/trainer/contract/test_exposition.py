"""trainer/contract/exposition.py: the bounded linear scanner of rank 0's exposition, on the trainer's
real output, hostile lines, and the worst shapes at the 1 MiB cap, its work counted in
interpreter lines (a count of operations, not a clock)."""

import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from longctx_trainer.contract.exposition import (
    MAX_BODY_BYTES,
    MAX_LINE_BYTES,
    MAX_SAMPLES,
    MFU,
    PROGRESS_METRICS,
    STEP,
    MetricsUnreadable,
    health_values,
    rank0_values,
)
from longctx_trainer.contract.metrics import TrainMetrics
from support.hostile_metrics import WORST_BODIES, filled


def test_the_trainers_own_output(monkeypatch):
    monkeypatch.setattr(time, "time", lambda: 1_800_000_000.0)  # the checkpoint's wall-clock time
    m = TrainMetrics("job", 0)
    m.observe_resume(8)
    m.observe_step(12, tokens=8192, seconds=0.25, loss=3.5, mfu={("causal", "bf16"): 0.41, ("full", "bf16"): 0.5})
    m.observe_checkpoint(10, 0.1)
    assert rank0_values(generate_latest(m.registry)) == {
        "longctx_train_step": 12,
        "longctx_train_tokens_per_second": 8192 / 0.25,
        "longctx_train_loss": 3.5,
        "longctx_train_mfu_ratio": 0.41,
        "longctx_train_last_checkpoint_step": 10,
        "longctx_train_last_checkpoint_timestamp_seconds": 1_800_000_000.0,
        "longctx_train_resumed_from_step": 8,
    }


def test_lines_of_other_names_are_skipped_and_a_malformed_progress_sample_is_not_quoted():
    assert rank0_values(b"secret-token-abc123 is not exposition {\n\x00\xff\n") == {}
    assert rank0_values(b"# longctx_train_step 5\nlongctx_train_steps_total 9\n longctx_train_step 7\n") == {}
    for line in (b'longctx_train_step{secret="abc123" 3', b"longctx_train_step secret-abc123", b"longctx_train_step{"):
        with pytest.raises(MetricsUnreadable) as error:
            rank0_values(b"longctx_train_loss 1\n" + line + b"\n")
        assert "secret" not in str(error.value) and "abc123" not in str(error.value)


def test_labels_timestamps_escapes_and_line_ends():
    text = (
        b'longctx_train_step{job="a\\"b,c}",rank="0",} 41 1700000000000\r\n'
        b'longctx_train_loss{ rank = "0" , x="\\\\" } 2.5e-1\n'
        b'longctx_train_tokens_per_second{rank="1"} 99\n'
        b"longctx_train_tokens_per_second\t.5"
    )
    assert rank0_values(text) == {STEP: 41, "longctx_train_loss": 0.25, "longctx_train_tokens_per_second": 0.5}


class _Budget(Exception):
    """More interpreter lines than the budget."""


def interpreter_lines(fn, *args, budget: int) -> int:
    """Python lines `fn(*args)` executes (a count of operations, independent of the machine's
    speed); raises _Budget as soon as it passes `budget`, so a parser that needs millions fails
    fast."""
    executed = 0

    def trace(frame, event, arg):
        nonlocal executed
        if event == "line":
            executed += 1
            if executed > budget:
                raise _Budget
        return trace

    sys.settrace(trace)
    try:
        fn(*args)
    except MetricsUnreadable:
        pass
    finally:
        sys.settrace(None)
    return executed


QUOTES = b'longctx_train_step{a="' + b'\\"' * (MAX_LINE_BYTES // 2 - 20) + b'"} 1\n'
WORST_SHAPES = WORST_BODIES | {
    "a comment line of tabs and quotes": filled(b'\t"', b"# HELP longctx_train_step ", b"\n"),
    "a progress metric's escaped quotes": filled(b'\\"', b'longctx_train_step{a="', b'"} 1\n'),
    "escaped quotes in lines at the length cap": filled(QUOTES),
    "samples past the count cap": filled(b'longctx_train_step{rank="0"} 1\n'),
    "empty lines": filled(b"\n"),
    "a long name": filled(b"p", b"longctx_train_step", b" 1\n"),
    "digits": filled(b"1", b"longctx_train_loss ", b"\n"),
}
LINES_PER_BODY = 50 * MAX_SAMPLES
"""The scanner's Python work: about twenty lines per sample it reads, at most MAX_SAMPLES samples,
whatever the body's size and shape (0.05 per byte of a body at the cap)."""


@pytest.mark.timeout(120)  # a guard against a hang, not a measurement
@pytest.mark.parametrize("shape", WORST_SHAPES)
def test_the_scanner_is_linear_on_the_worst_expositions_at_the_cap(shape):
    """Defect 1 of issue #26: prometheus_client's parser took 42 s on one of these bodies, on the
    event loop, and runs millions of lines on most of them. The scanner's Python work is bounded
    by its caps, and the rest is one pass of regular expressions whose alternatives never overlap
    (so they never backtrack more than once per byte)."""
    body = WORST_SHAPES[shape]
    assert MAX_BODY_BYTES - MAX_LINE_BYTES < len(body) <= MAX_BODY_BYTES
    assert interpreter_lines(rank0_values, body, budget=LINES_PER_BODY) <= LINES_PER_BODY


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape", ["samples past the count cap", "a progress metric's escaped quotes"])
def test_the_health_read_of_every_rank_has_the_same_bound(shape):
    assert interpreter_lines(health_values, WORST_SHAPES[shape], budget=LINES_PER_BODY) <= LINES_PER_BODY
    phases = filled(b'longctx_train_phase{phase="training"} 1\n')
    with pytest.raises(MetricsUnreadable, match=f"more than {MAX_SAMPLES}"):
        health_values(phases)


def test_the_health_metrics_of_the_trainers_own_output():
    m = TrainMetrics("job", 2)
    m.enter("rendezvous")
    assert health_values(generate_latest(m.registry))["longctx_train_phase"] == "rendezvous"
    m.enter("training")
    m.observe_step(12, tokens=8, seconds=0.25, loss=3.5, mfu={})
    values = health_values(generate_latest(m.registry))
    assert (values["longctx_train_phase"], values["longctx_train_heartbeat_step"]) == ("training", 12)
    assert values["longctx_train_last_step_seconds"] == 0.25
    assert values["longctx_train_heartbeat_timestamp_seconds"] > 1.7e9
    # a phase the contract does not name is ignored
    assert health_values(b'longctx_train_phase{phase="lunch"} 1\n') == {}


def test_more_samples_than_the_cap_are_unreadable_and_long_lines_are_skipped():
    with pytest.raises(MetricsUnreadable, match=f"more than {MAX_SAMPLES}"):
        rank0_values(b"longctx_train_step 1\n" * (MAX_SAMPLES + 1))
    assert rank0_values(b"longctx_train_step 1\n" * MAX_SAMPLES) == {STEP: 1}
    long = b'longctx_train_step{a="' + b"x" * MAX_LINE_BYTES + b'"} 9\n'
    assert rank0_values(b"longctx_train_step 2\n" + long) == {STEP: 2}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=st.binary(max_size=512) | st.lists(st.sampled_from(list(WORST_SHAPES.values()))).map(b"".join))
def test_any_body_gives_values_or_a_readable_error(body):
    try:
        values = rank0_values(body[: 4 * MAX_BODY_BYTES])
    except MetricsUnreadable as error:
        assert str(error).startswith(("malformed longctx_train_", "more than"))
    else:
        assert set(values) <= set(PROGRESS_METRICS)


label = st.sampled_from(["rank", "convention", "peak", "job_name", "a"])
label_value = st.text(alphabet=st.sampled_from(list('0causlbf16"\\\n x')), max_size=8)
sample = st.tuples(
    st.sampled_from(PROGRESS_METRICS),
    st.dictionaries(label, label_value, max_size=3),
    st.floats(allow_nan=False) | st.integers(-(2**40), 2**40),
)


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


@settings(max_examples=200, deadline=None)
@given(samples=st.lists(sample, max_size=8))
def test_it_agrees_with_prometheus_clients_parser_on_valid_expositions(samples):
    lines = []
    for name, labels, value in samples:
        text = ",".join(f'{k}="{_escaped(v)}"' for k, v in labels.items())
        lines.append(f"{name}{{{text}}} {float(value)!r}".replace("inf", "Inf"))
    text = "".join(line + "\n" for line in lines)
    expected = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.labels.get("rank", "0") != "0":
                continue
            if s.name == MFU and (s.labels.get("convention") != "causal" or s.labels.get("peak", "bf16") != "bf16"):
                continue
            expected[s.name] = s.value
    assert rank0_values(text.encode()) == pytest.approx(expected, nan_ok=True)
