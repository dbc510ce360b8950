"""`longctx run`'s parsing of rank 0's output and its progress line."""

from longctx_operator.localrun import parse_event, progress_line

EVENT = '{"event": "step", "step": 1, "loss": 5.5, "tokens_per_second": 1234.0, "mfu": 0.0025}'


def test_progress_events_survive_interleaved_native_output():
    assert parse_event(EVENT + "\n")["step"] == 1
    assert parse_event("[Gloo] Rank 0 is connected to " + EVENT + "\n")["step"] == 1
    assert parse_event("1\n") is None and parse_event("[Gloo] Rank 0\n") is None


def test_progress_line():
    assert progress_line(parse_event(EVENT), 30) == \
        "step 1/30  loss 5.5000  1,234 tokens/s  MFU 0.25%"


def test_readme_names_the_progress_file_the_run_writes():
    from pathlib import Path

    from longctx_operator.localrun import PROGRESS_FILE

    assert f"`{PROGRESS_FILE}`" in (Path(__file__).resolve().parents[2] / "README.md").read_text()
