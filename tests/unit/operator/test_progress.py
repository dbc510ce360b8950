"""status.progress from the trainer's real exporter output (TrainMetrics, generate_latest), and
reads of rank 0's endpoint that stay bounded whatever the job's pod serves."""

import http.server
import threading
import time

import pytest
from prometheus_client import generate_latest

from longctx_operator.config import OperatorConfig
from longctx_operator.progress import MAX_BODY_BYTES, MetricsUnreadable, fetch_metrics, metrics_source, parse_progress
from longctx_trainer.metrics import TrainMetrics


def exposition(rank=0, steps=True):
    m = TrainMetrics("job", rank)
    if steps:
        m.observe_step(
            12,
            tokens=8192,
            seconds=0.25,
            loss=3.5,
            mfu={("causal", "bf16"): 0.41, ("full", "bf16"): 0.52, ("causal", "fp8"): 0.2},
        )
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


def test_metrics_source_is_rank_zero_unless_the_admin_allows_the_jobs_url():
    config = OperatorConfig()
    assert metrics_source({}, "10.0.0.5", 9400, config).url == "http://10.0.0.5:9400/metrics"
    assert metrics_source({}, "fd00::5", 9400, config).url == "http://[fd00::5]:9400/metrics"
    assert metrics_source({}, None, 9400, config).url is None
    asked = {"longctx.io/metrics-url": "http://127.0.0.1:1/metrics"}
    refused = metrics_source(asked, "10.0.0.5", 9400, config)
    assert refused.url == "http://10.0.0.5:9400/metrics" and "metricsUrlPrefixes" in refused.refused
    allowed = OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"])
    assert metrics_source(asked, "10.0.0.5", 9400, allowed).url == "http://127.0.0.1:1/metrics"
    for url in ("file:///var/run/secrets/kubernetes.io/serviceaccount/token", "ftp://127.0.0.1:1/x"):
        prefixed = OperatorConfig(metrics_url_prefixes=[url[:10]])
        assert metrics_source({"longctx.io/metrics-url": url}, None, 9400, prefixed).url is None


def test_non_finite_and_huge_values_never_reach_the_status():
    text = (
        "longctx_train_step 1e300\nlongctx_train_loss NaN\nlongctx_train_tokens_per_second +Inf\n"
        'longctx_train_mfu_ratio{convention="causal"} 0.5\n'
    )
    p = parse_progress(text, "t")
    assert (p.step, p.loss, p.tokens_per_second, p.mfu) == (None, None, None, 0.5)


def test_mfu_is_the_causal_convention_against_the_bf16_peak():
    text = (
        'longctx_train_step 3\nlongctx_train_mfu_ratio{convention="causal",peak="fp8"} 0.2\n'
        'longctx_train_mfu_ratio{convention="full",peak="bf16"} 0.6\n'
        'longctx_train_mfu_ratio{convention="causal",peak="bf16"} 0.4\n'
    )
    assert parse_progress(text, "t").mfu == 0.4


def test_an_unparsable_body_is_an_error_that_does_not_quote_it():
    with pytest.raises(MetricsUnreadable) as error:
        parse_progress("secret-token-abc123 is not exposition {", "t")
    assert "secret" not in str(error.value)


class _Server(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/huge":
            self.send_response(200)
            self.end_headers()
            chunk = b"x" * 65536
            for _ in range(MAX_BODY_BYTES // len(chunk) + 4):
                self.wfile.write(chunk)
        elif self.path == "/trickle":
            self.send_response(200)
            self.end_headers()
            for _ in range(600):  # a minute: the read must give up long before (the test's timeout)
                self.wfile.write(b"#")
                self.wfile.flush()
                time.sleep(0.1)
        elif self.path == "/redirect":
            self.send_response(302)
            self.send_header("Location", "file:///etc/passwd")
            self.end_headers()
        else:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"longctx_train_step 3\n")

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Server)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.mark.timeout(30)
def test_reads_are_bounded_in_size_and_time_and_follow_no_redirect(server):
    assert parse_progress(fetch_metrics(server + "/metrics"), "t").step == 3
    with pytest.raises(MetricsUnreadable, match="larger than"):
        fetch_metrics(server + "/huge")
    with pytest.raises(MetricsUnreadable, match="longer than"):
        fetch_metrics(server + "/trickle", timeout=1.0)
    with pytest.raises(MetricsUnreadable):
        fetch_metrics(server + "/redirect")
    with pytest.raises(MetricsUnreadable, match="only http"):
        fetch_metrics("file:///dev/zero")


# (seconds, step) reads of rank 0 every 10 s, as the progress poller records them.
STEADY = [(10.0 * i, 5 * i) for i in range(10)]  # 0.5 steps/s
SLOWING = [(10.0 * i, 5 * i) for i in range(10)] + [(90 + 10.0 * i, 45 + i) for i in range(1, 31)]
RESTARTED = [(0.0, 0), (10.0, 10), (20.0, 20), (30.0, 30), (40.0, 20), (50.0, 22), (60.0, 24)]


def test_completion_of_a_steady_run():
    from longctx_operator.progress import completion

    done = completion(STEADY, total_steps=100)
    assert done.percent == 45.0
    assert done.eta_seconds == pytest.approx((100 - 45) / 0.5)


def test_completion_follows_a_slowdown_within_the_window():
    """After 300 s at 0.1 steps/s the estimate uses only those reads, not the fast start."""
    from longctx_operator.progress import completion

    done = completion(SLOWING, total_steps=100)
    assert done.percent == 75.0
    assert done.eta_seconds == pytest.approx((100 - 75) / 0.1)


def test_completion_after_a_restart_counts_from_the_resumed_step():
    from longctx_operator.progress import completion

    done = completion(RESTARTED, total_steps=100)
    assert done.percent == 24.0
    assert done.eta_seconds == pytest.approx((100 - 24) / 0.2)  # 4 steps in 20 s since step 20


def test_completion_without_movement_or_at_the_end():
    from longctx_operator.progress import completion

    assert completion([(0.0, 7)], 100).eta_seconds is None
    assert completion([(0.0, 7), (10.0, 7)], 100).eta_seconds is None
    assert completion([(0.0, 90), (10.0, 100)], 100).eta_seconds == 0.0
    assert completion([], 100).percent is None


@pytest.mark.parametrize(
    "seconds, text", [(45, "45s"), (125, "2m5s"), (725, "12m"), (4320, "1h12m"), (7200, "2h"), (273600, "3d4h")]
)
def test_duration_text(seconds, text):
    from longctx_operator.progress import duration_text

    assert duration_text(seconds) == text
