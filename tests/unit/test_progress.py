"""status.progress from the trainer's real exporter output (TrainMetrics, generate_latest), and
reads of rank 0's endpoint that stay bounded whatever the job's pod serves."""

import http.server
import threading
import time

import pytest
from prometheus_client import generate_latest

from longctx_operator.config import OperatorConfig
from longctx_operator.progress import (MAX_BODY_BYTES, MetricsUnreadable, fetch_metrics, metrics_source,
                                       parse_progress)
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
    text = ("longctx_train_step 1e300\nlongctx_train_loss NaN\nlongctx_train_tokens_per_second +Inf\n"
            "longctx_train_mfu_ratio{convention=\"causal\"} 0.5\n")
    p = parse_progress(text, "t")
    assert (p.step, p.loss, p.tokens_per_second, p.mfu) == (None, None, None, 0.5)


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
