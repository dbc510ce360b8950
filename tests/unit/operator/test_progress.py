"""status.progress from the trainer's real exporter output (TrainMetrics, generate_latest), read by
the bounded scanner (operator/exposition.py) and the bounded read (operator/scrape.py), whatever
the job's pod serves; the completion arithmetic and the progress timer (operator/progress.py)."""

import asyncio
import http.server
import sys
import threading
import time

import pytest
from prometheus_client import generate_latest

from longctx_operator.cache import Cache
from longctx_operator.config import OperatorConfig
from longctx_operator.exposition import MAX_LINE_BYTES, MAX_SAMPLES, MetricsUnreadable
from longctx_operator.progress import ProgressPoller, metrics_source, parse_progress
from longctx_operator.scrape import MAX_BODY_BYTES, fetch_metrics
from longctx_trainer.metrics import TrainMetrics


def exposition(rank=0, steps=True) -> bytes:
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
    return generate_latest(m.registry)


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
    p = parse_progress(generate_latest(m.registry), "t")
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
        b"longctx_train_step 1e300\nlongctx_train_loss NaN\nlongctx_train_tokens_per_second +Inf\n"
        b'longctx_train_mfu_ratio{convention="causal"} 0.5\n'
    )
    p = parse_progress(text, "t")
    assert (p.step, p.loss, p.tokens_per_second, p.mfu) == (None, None, None, 0.5)


@pytest.mark.parametrize(
    "sample, field",
    [
        (b"longctx_train_step -5", "step"),
        (b"longctx_train_last_checkpoint_step -1", "last_checkpoint_step"),
        (b'longctx_train_mfu_ratio{convention="causal"} 1e300', "mfu"),
        (b'longctx_train_mfu_ratio{convention="causal"} -0.1', "mfu"),
        (b'longctx_train_mfu_ratio{convention="causal"} 1.5', "mfu"),
        (b"longctx_train_tokens_per_second -3", "tokens_per_second"),
        (b"longctx_train_tokens_per_second 1e200", "tokens_per_second"),
        (b"longctx_train_loss 1e300", "loss"),
        (b"longctx_train_loss -1e300", "loss"),
    ],
)
def test_values_no_trainer_could_mean_are_dropped(sample, field):
    """Defect 11 of issue #26: a negative step or an MFU of 1e300 reached status.progress."""
    p = parse_progress(b"longctx_train_loss 2.5\n" + sample + b"\n", "t")
    assert getattr(p, field) is None


def test_mfu_is_the_causal_convention_against_the_bf16_peak():
    text = (
        b'longctx_train_step 3\nlongctx_train_mfu_ratio{convention="causal",peak="fp8"} 0.2\n'
        b'longctx_train_mfu_ratio{convention="full",peak="bf16"} 0.6\n'
        b'longctx_train_mfu_ratio{convention="causal",peak="bf16"} 0.4\n'
    )
    assert parse_progress(text, "t").mfu == 0.4


def test_lines_of_other_names_are_skipped_and_a_malformed_progress_sample_is_not_quoted():
    assert parse_progress(b"secret-token-abc123 is not exposition {\n\x00\xff\n", "t") is None
    assert parse_progress(b"# longctx_train_step 5\nlongctx_train_steps_total 9\n longctx_train_step 7\n", "t") is None
    for line in (b'longctx_train_step{secret="abc123" 3', b"longctx_train_step secret-abc123", b"longctx_train_step{"):
        with pytest.raises(MetricsUnreadable) as error:
            parse_progress(b"longctx_train_loss 1\n" + line + b"\n", "t")
        assert "secret" not in str(error.value) and "abc123" not in str(error.value)


def test_labels_timestamps_escapes_and_line_ends():
    text = (
        b'longctx_train_step{job="a\\"b,c}",rank="0",} 41 1700000000000\r\n'
        b'longctx_train_loss{ rank = "0" , x="\\\\" } 2.5e-1\n'
        b'longctx_train_tokens_per_second{rank="1"} 99\n'
        b"longctx_train_tokens_per_second\t.5"
    )
    p = parse_progress(text, "t")
    assert (p.step, p.loss, p.tokens_per_second) == (41, 0.25, 0.5)


class _Budget(Exception):
    """More interpreter steps than the budget."""


def interpreter_lines(fn, *args, budget: int) -> int:
    """Python lines `fn(*args)` executes (a count of operations, independent of the machine's
    speed); raises _Budget as soon as it passes `budget`, so a parser that needs millions fails fast."""
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


def _at_the_cap(unit: bytes, head: bytes = b"", tail: bytes = b"") -> bytes:
    return head + unit * ((MAX_BODY_BYTES - len(head) - len(tail)) // len(unit)) + tail


def _lines_at_the_cap(line: bytes) -> bytes:
    return _at_the_cap(line + b"\n")


QUOTES = b'longctx_train_step{a="' + b'\\"' * (MAX_LINE_BYTES // 2 - 20) + b'"} 1'
WORST_SHAPES = {
    "a comment line of spaces": _at_the_cap(b" ", b"#", b"x\n"),
    "a comment line of tabs and quotes": _at_the_cap(b'\t"', b"# HELP longctx_train_step ", b"\n"),
    "a label value of escaped quotes": _at_the_cap(b'\\"', b'longctx_train_step{a="', b'"} 1\n'),
    "another metric's escaped quotes": _at_the_cap(b'\\"', b'x{a="', b'"} 1\n'),
    "a run of backslashes": _at_the_cap(b"\\\\", b'longctx_train_loss{a="', b'\\"} 1\n'),
    "escaped quotes in lines at the length cap": _lines_at_the_cap(QUOTES),
    "samples past the count cap": _lines_at_the_cap(b'longctx_train_step{rank="0"} 1'),
    "empty lines": _at_the_cap(b"\n"),
    "a long name": _at_the_cap(b"p", b"longctx_train_step", b" 1\n"),
    "digits": _at_the_cap(b"1", b"longctx_train_loss ", b"\n"),
}
LINES_PER_BODY = 50 * MAX_SAMPLES
"""The scanner's Python work: about twenty lines per sample it reads, at most MAX_SAMPLES samples,
whatever the body's size and shape (0.05 per byte of a body at the cap)."""


@pytest.mark.timeout(120)  # a guard against a hang, not a measurement
@pytest.mark.parametrize("shape", WORST_SHAPES)
def test_the_scanner_is_linear_on_the_worst_expositions_at_the_cap(shape):
    """Defect 1 of issue #26: prometheus_client's parser took 42 s on one of these bodies, on the
    event loop. The scanner's Python work is bounded by its caps (counted in interpreter lines),
    and the rest is one pass of a regular expression whose alternatives never overlap."""
    body = WORST_SHAPES[shape]
    assert MAX_BODY_BYTES - MAX_LINE_BYTES < len(body) <= MAX_BODY_BYTES
    assert interpreter_lines(parse_progress, body, "t", budget=LINES_PER_BODY) <= LINES_PER_BODY


def test_more_samples_than_the_cap_are_unreadable_and_long_lines_are_skipped():
    with pytest.raises(MetricsUnreadable, match=f"more than {MAX_SAMPLES}"):
        parse_progress(b"longctx_train_step 1\n" * (MAX_SAMPLES + 1), "t")
    assert parse_progress(b"longctx_train_step 1\n" * MAX_SAMPLES, "t").step == 1
    long = b'longctx_train_step{a="' + b"x" * MAX_LINE_BYTES + b'"} 9\n'
    assert parse_progress(b"longctx_train_step 2\n" + long, "t").step == 2


HONEST = b"longctx_train_step 3\n"


def _forever(write, unit: bytes, pause: float = 0.05) -> None:
    """Writes `unit` every `pause` seconds for a minute, or until the reader hangs up."""
    for _ in range(int(60 / pause)):
        write(unit)
        time.sleep(pause)


class _Server(http.server.BaseHTTPRequestHandler):
    """Honest and hostile metrics endpoints; the hostile ones keep going until the reader hangs up."""

    protocol_version = "HTTP/1.1"

    def raw(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def do_GET(self):
        path = self.path
        if path == "/huge":
            self.raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            for _ in range(MAX_BODY_BYTES // 65536 + 4):
                self.raw(b"x" * 65536)
        elif path == "/huge-length":
            self.raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
        elif path == "/trickle":  # the body a byte at a time
            self.raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            _forever(self.raw, b"#", 0.1)
        elif path == "/silent":  # slowloris: the connection open, nothing sent
            time.sleep(60)
        elif path == "/trickle-head":  # a header line that never ends
            self.raw(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            _forever(self.raw, b"a")
        elif path == "/trickle-headers":  # complete header lines that never end the head
            self.raw(b"HTTP/1.1 200 OK\r\n")
            _forever(self.raw, b"X: y\r\n", 0.3)
        elif path == "/trickle-chunks":  # valid one-byte chunks, each sent a byte at a time
            self.raw(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            for _ in range(600):
                for byte in b"1\r\n#\r\n":
                    self.raw(bytes([byte]))
                    time.sleep(0.02)
        elif path == "/continue":  # interim responses forever
            _forever(self.raw, b"HTTP/1.1 100 Continue\r\n\r\n", 0.3)
        elif path == "/continue-fast":
            _forever(self.raw, b"HTTP/1.1 100 Continue\r\n\r\n", 0.001)
        elif path == "/redirect":
            self.raw(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n")
        elif path == "/gzip":
            self.raw(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nxx")
        elif path == "/chunked":
            self.raw(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            self.raw(b"b;ext=1\r\nlongctx_tra\r\n" + b"a\r\nin_step 3\n\r\n0\r\nTrailer: x\r\n\r\n")
            self.close_connection = True
        else:
            self.raw(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(HONEST) + HONEST)

    def log_message(self, *args):
        pass


def serve(handler) -> tuple[http.server.ThreadingHTTPServer, str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


@pytest.fixture(scope="module")
def server():
    httpd, url = serve(_Server)
    yield url
    httpd.shutdown()


def read(url: str, **kwargs) -> bytes:
    return asyncio.run(fetch_metrics(url, **kwargs)).payload()


@pytest.mark.timeout(60)  # each hostile read must end at its deadline; the servers go on for a minute
def test_reads_are_bounded_in_size_and_time_and_follow_no_redirect(server):
    assert parse_progress(read(server + "/metrics"), "t").step == 3
    assert parse_progress(read(server + "/chunked"), "t").step == 3
    with pytest.raises(MetricsUnreadable, match="larger than"):
        read(server + "/huge")
    with pytest.raises(MetricsUnreadable, match="larger than"):
        read(server + "/huge-length")
    with pytest.raises(MetricsUnreadable, match="redirects"):
        read(server + "/redirect")
    with pytest.raises(MetricsUnreadable, match="compressed"):
        read(server + "/gzip")
    with pytest.raises(MetricsUnreadable, match="only http"):
        read("file:///dev/zero")
    with pytest.raises(MetricsUnreadable, match="control"):
        read(server + "/metrics HTTP/1.1\r\nX: y")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "path", ["/trickle", "/silent", "/trickle-head", "/trickle-headers", "/trickle-chunks", "/continue"]
)
def test_a_slow_endpoint_is_cut_off_at_the_total_deadline(server, path):
    """Defect 2 of issue #26: the deadline was checked only between body chunks, so a head or a
    chunk-size line trickled a byte at a time, or endless 100 Continue, held the read (and its
    thread) as long as the server liked. Each of these servers goes on for a minute."""
    with pytest.raises(MetricsUnreadable, match="no complete response within 1 s"):
        read(server + path, timeout=1.0)


def test_interim_responses_and_header_lines_are_counted(server):
    with pytest.raises(MetricsUnreadable, match="header lines"):
        read(server + "/continue-fast", timeout=30.0)


def test_the_connection_is_closed_at_the_deadline(server):
    """The server sees the reader hang up when the read gives up (no socket or thread is kept)."""
    closed = threading.Event()

    class Watched(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            try:
                _forever(lambda data: (self.wfile.write(data), self.wfile.flush()), b"X: y\r\n", 0.05)
            except OSError:
                closed.set()

        def log_message(self, *args):
            pass

    httpd, url = serve(Watched)
    try:
        with pytest.raises(MetricsUnreadable):
            read(url, timeout=0.5)
        assert closed.wait(timeout=30)
    finally:
        httpd.shutdown()


class _Patches:
    """Kube's status patch, recorded per job."""

    def __init__(self, cache: Cache):
        self.cache, self.steps = cache, {}

    def patch_status(self, namespace, name, status):
        self.steps.setdefault(name, []).append(status["progress"]["step"])
        obj = self.cache.jobs_of[(namespace, name)]
        return {**obj, "status": {**obj["status"], **status}}


def running_job(name: str, url: str) -> dict:
    return {
        "metadata": {"namespace": "team", "name": name, "annotations": {"longctx.io/metrics-url": url}},
        "spec": {"steps": 100},
        "status": {"phase": "Running", "workloadGeneration": 1},
    }


@pytest.mark.timeout(60)
def test_a_hostile_endpoint_delays_no_other_jobs_progress(server):
    """Defect 2 of issue #26: the poller waited for every read before the next round, so one
    endpoint that never finishes froze the progress of every job. Here one job's endpoint trickles
    its head forever; the honest job is read at its interval meanwhile."""
    cache = Cache()
    kube = _Patches(cache)
    for name, path in (("hostile", "/trickle-head"), ("silent", "/silent"), ("honest", "/metrics")):
        cache.put_job(running_job(name, server + path), deleted=False)

    async def call(fn, *args):
        return fn(*args)

    config = OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"], progress_interval_seconds=0.1)
    poller = ProgressPoller(cache, kube, call, config)

    async def go():
        task = asyncio.create_task(poller.run())
        while len(kube.steps.get("honest", [])) < 5:  # bounded by the test's timeout
            await asyncio.sleep(0.05)
        assert set(poller._tasks) == {("team", "hostile"), ("team", "silent"), ("team", "honest")}
        poller.forget(("team", "hostile"))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not poller._tasks

    asyncio.run(go())
    poller.stop()
    assert kube.steps["honest"][:5] == [3] * 5 and "hostile" not in kube.steps


def test_reads_that_keep_failing_back_off():
    poller = ProgressPoller(None, None, None, OperatorConfig(progress_interval_seconds=10))
    assert [poller.next_read_delay(n) for n in (0, 1, 2, 3, 9)] == [10, 20, 40, 60, 60]
    slow = ProgressPoller(None, None, None, OperatorConfig(progress_interval_seconds=600))
    assert slow.next_read_delay(3) == 600


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


def test_completion_without_movement():
    from longctx_operator.progress import completion

    assert completion([(0.0, 7)], 100).eta_seconds is None
    assert completion([(0.0, 7), (10.0, 7)], 100).eta_seconds is None
    assert completion([], 100).percent is None


def test_a_running_job_is_never_shown_done_nor_finishing_beyond_any_date():
    """Defect 11 of issue #26: step = steps while Running showed 100 % and an ETA of 0 s, and an
    ETA too far to be a date made every progress update of the job fail."""
    from longctx_operator.progress import MAX_ETA_SECONDS, completion

    assert completion([(0.0, 90), (10.0, 100)], 100) == completion([(0.0, 90), (10.0, 120)], 100)
    assert completion([(0.0, 90), (10.0, 100)], 100).percent == 99.9
    assert completion([(0.0, 90), (10.0, 100)], 100).eta_seconds is None
    assert completion([(0.0, 1), (300.0, 2)], 2**62).eta_seconds is None
    assert completion([(0.0, 1), (300.0, 2)], 2 + int(MAX_ETA_SECONDS / 300)).eta_seconds is not None
    assert completion([(0.0, -5)], 100).percent == 0.0


def test_steps_beyond_spec_steps_are_capped():
    from longctx_operator.api.status import ProgressStatus
    from longctx_operator.progress import within_steps

    capped = within_steps(ProgressStatus(step=10**15, last_checkpoint_step=10**15, loss=2.0), 100)
    assert (capped.step, capped.last_checkpoint_step, capped.loss) == (100, 100, 2.0)
    assert within_steps(ProgressStatus(loss=2.0), 100) == ProgressStatus(loss=2.0)


@pytest.mark.parametrize(
    "seconds, text", [(45, "45s"), (125, "2m5s"), (725, "12m"), (4320, "1h12m"), (7200, "2h"), (273600, "3d4h")]
)
def test_duration_text(seconds, text):
    from longctx_operator.progress import duration_text

    assert duration_text(seconds) == text
