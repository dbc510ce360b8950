"""Metrics endpoints as a hostile job author could serve them on rank 0's `metrics.port`: the
exposition shapes that make a general Prometheus parser quadratic, and answers that come slowly
or never end (`from support import hostile_metrics`). Used by the unit tests of the scanner, the
read and the progress timer, and by the operator's hostile-endpoint integration test."""

from __future__ import annotations

import http.server
import threading
import time

from longctx_trainer.contract.exposition import MAX_BODY_BYTES

STEP = b"longctx_train_step 1\n"


def filled(unit: bytes, head: bytes = b"", tail: bytes = b"", size: int = MAX_BODY_BYTES) -> bytes:
    """head + unit repeated + tail, at most `size` bytes and less than one unit short of it."""
    return head + unit * ((size - len(head) - len(tail)) // len(unit)) + tail


WORST_BODIES = {
    "a comment line of spaces": filled(b" ", b"#", b"x\n" + STEP),
    "a label value of escaped quotes": filled(b'\\"', b'other{a="', b'"} 1\n' + STEP),
    "a run of backslashes": filled(b"\\\\", b'longctx_train_loss{a="', b'\\"} 1\n' + STEP),
}
"""Bodies at the 1 MiB cap that took prometheus_client's parser tens of seconds, each ending with
a valid step line (a reader that copes with them reads step 1)."""

SLOW_ANSWERS = (
    "silence",
    "a trickled head",
    "trickled header lines",
    "trickled chunks",
    "a trickled body",
    "100 Continue forever",
)


def slow_answer(mode: str, write) -> None:
    """Sends one of SLOW_ANSWERS through `write(bytes)` for a minute (raises OSError when the
    reader hangs up)."""

    def forever(unit: bytes, pause: float) -> None:
        for _ in range(int(60 / pause)):
            write(unit)
            time.sleep(pause)

    if mode == "silence":  # slowloris: the connection open, nothing sent
        time.sleep(60)
    elif mode == "a trickled head":  # a header line that never ends
        write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
        forever(b"a", 0.05)
    elif mode == "trickled header lines":  # complete header lines that never end the head
        write(b"HTTP/1.1 200 OK\r\n")
        forever(b"X: y\r\n", 0.3)
    elif mode == "trickled chunks":  # valid one-byte chunks, each sent a byte at a time
        write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(500):
            for byte in b"1\r\n#\r\n":
                write(bytes([byte]))
                time.sleep(0.02)
    elif mode == "a trickled body":
        write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        forever(b"#", 0.1)
    elif mode == "100 Continue forever":
        forever(b"HTTP/1.1 100 Continue\r\n\r\n", 0.3)
    else:
        raise ValueError(mode)


class Handler(http.server.BaseHTTPRequestHandler):
    """Writes raw HTTP: `answer(path)` in a subclass calls `self.raw` and `slow_answer`."""

    def raw(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def ok(self, body: bytes) -> None:
        self.raw(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

    def do_GET(self):
        try:
            self.answer(self.path)
        except OSError:
            pass  # the reader hung up

    def answer(self, path: str) -> None:
        raise NotImplementedError

    def log_message(self, *args):
        pass


def serve(handler: type[http.server.BaseHTTPRequestHandler]) -> tuple[http.server.ThreadingHTTPServer, str]:
    """`handler` on a free local port in a daemon thread, and its URL; shut it down when done."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"
