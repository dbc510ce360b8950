"""status.progress from the trainer's real exporter output (TrainMetrics, generate_latest)."""

from prometheus_client import generate_latest

from longctx_operator.progress import metrics_url, parse_progress
from longctx_trainer.metrics import TrainMetrics


def exposition(rank=0, steps=True):
    m = TrainMetrics("job", rank)
    if steps:
        m.observe_step(12, tokens=8192, seconds=0.25, loss=3.5, mfu={"causal": 0.41, "full": 0.52})
        m.observe_checkpoint(10, 0.1)
    return generate_latest(m.registry).decode()


def test_progress_of_rank_zero():
    p = parse_progress(exposition(), "2026-01-01T00:00:00Z")
    assert (p.step, p.tokens_per_second, p.loss, p.mfu, p.last_checkpoint_step) == (12, 8192 / 0.25, 3.5, 0.41, 10)
    assert p.updated_at == "2026-01-01T00:00:00Z"


def test_other_ranks_are_ignored():
    assert parse_progress(exposition(rank=1), "t") is None


def test_nothing_before_the_first_step():
    assert parse_progress(exposition(steps=False), "t") is None


def test_resume_sets_step_and_checkpoint_only():
    m = TrainMetrics("job", 0)
    m.observe_resume(40)
    p = parse_progress(generate_latest(m.registry).decode(), "t")
    assert (p.step, p.last_checkpoint_step, p.tokens_per_second, p.loss) == (40, 40, None, None)


def test_metrics_url():
    assert metrics_url({}, "10.0.0.5", 9400) == "http://10.0.0.5:9400/metrics"
    assert metrics_url({}, "fd00::5", 9400) == "http://[fd00::5]:9400/metrics"
    assert metrics_url({"longctx.io/metrics-url": "http://127.0.0.1:1/metrics"}, "10.0.0.5", 9400) \
        == "http://127.0.0.1:1/metrics"
    assert metrics_url({}, None, 9400) is None
