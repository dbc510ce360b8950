"""operator/scrape.py: the read of rank 0's endpoint stays bounded in size and time whatever the
job's pod serves (hostile answers from tests/support/hostile_metrics.py), and a chunked body is
decoded."""

import asyncio
import socket
import threading

import pytest

from longctx_operator.scrape import MAX_CHUNKS, NotListening, dechunk, fetch_metrics
from longctx_trainer.contract.exposition import MAX_BODY_BYTES, MetricsUnreadable
from support.hostile_metrics import SLOW_ANSWERS, Handler, serve, slow_answer
from support.ports import free_port

HONEST = b"longctx_train_step 3\n"


class Endpoints(Handler):
    def answer(self, path: str) -> None:
        if path == "/huge":
            self.raw(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
            for _ in range(MAX_BODY_BYTES // 65536 + 4):
                self.raw(b"x" * 65536)
        elif path == "/huge-length":
            self.raw(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000000\r\n\r\n")
        elif path == "/continue-fast":
            for _ in range(60_000):
                self.raw(b"HTTP/1.1 100 Continue\r\n\r\n")
        elif path == "/redirect":
            self.raw(b"HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd\r\nContent-Length: 0\r\n\r\n")
        elif path == "/gzip":
            self.raw(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nxx")
        elif path == "/chunked":
            self.raw(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            self.raw(b"b;ext=1\r\nlongctx_tra\r\n" + b"a\r\nin_step 3\n\r\n0\r\nTrailer: x\r\n\r\n")
            self.close_connection = True
        elif (answer := path.lstrip("/").replace("-", " ")) in SLOW_ANSWERS:
            slow_answer(answer, self.raw)
        else:
            self.ok(HONEST)


@pytest.fixture(scope="module")
def server():
    httpd, url = serve(Endpoints)
    yield url
    httpd.shutdown()


def read(url: str, **kwargs) -> bytes:
    return asyncio.run(fetch_metrics(url, **kwargs)).payload()


def test_reads_are_bounded_in_size_follow_no_redirect_and_decode_chunks(server):
    assert read(server + "/metrics") == HONEST
    assert read(server + "/chunked") == HONEST
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


@pytest.mark.timeout(60)  # each read must end at its deadline; the servers go on for a minute
@pytest.mark.parametrize("answer", SLOW_ANSWERS)
def test_a_slow_endpoint_is_cut_off_at_the_total_deadline(server, answer):
    """Defect 2 of issue #26: the deadline was checked only between body chunks, so a head or a
    chunk-size line trickled a byte at a time, or endless 100 Continue, held the read (and its
    thread) for as long as the server liked."""
    with pytest.raises(MetricsUnreadable, match="no complete response within 1 s"):
        read(f"{server}/{answer.replace(' ', '-')}", timeout=1.0)


def test_interim_responses_and_header_lines_are_counted(server):
    with pytest.raises(MetricsUnreadable, match="header lines"):
        read(server + "/continue-fast", timeout=30.0)


def test_the_connection_is_closed_at_the_deadline():
    """The server sees the reader hang up when the read gives up: no socket or thread is kept."""
    closed = threading.Event()

    class Watched(Handler):
        def do_GET(self):
            try:
                slow_answer("trickled header lines", self.raw)
            except OSError:
                closed.set()

    httpd, url = serve(Watched)
    try:
        with pytest.raises(MetricsUnreadable):
            read(url, timeout=0.5)
        assert closed.wait(timeout=30)
    finally:
        httpd.shutdown()


def test_dechunk_refuses_malformed_truncated_and_too_many_chunks():
    assert dechunk(b"3\r\nabc\r\n0\r\n\r\n") == b"abc"
    for body in (b"3\r\nabc\r\n", b"3\r\nabcd\r\n0\r\n", b"zz\r\n", b"3\r\nab", b"1" * 300):
        with pytest.raises(MetricsUnreadable, match="malformed"):
            dechunk(body)
    with pytest.raises(MetricsUnreadable, match=f"more than {MAX_CHUNKS}"):
        dechunk(b"1\r\nx\r\n" * (MAX_CHUNKS + 1) + b"0\r\n\r\n")


def test_a_refused_connection_is_told_apart():
    """progress.Backoff does not slow the reads for it (a trainer restarting in its pod)."""
    with pytest.raises(NotListening, match="refused"):
        asyncio.run(fetch_metrics(f"http://127.0.0.1:{free_port()}/metrics"))
    with socket.create_server(("127.0.0.1", 0)) as silent:  # listens, never answers: the deadline
        with pytest.raises(MetricsUnreadable, match="within") as late:
            asyncio.run(fetch_metrics(f"http://127.0.0.1:{silent.getsockname()[1]}/metrics", timeout=0.2))
    assert not isinstance(late.value, NotListening)
