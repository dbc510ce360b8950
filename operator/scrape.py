"""The bounded read of rank 0's metrics endpoint: one HTTP/1.1 GET under a hard total deadline.

The endpoint is served by the job's image, so it is read as a hostile peer: everything, from the
connection to the last byte (interim `100 Continue` responses, each header line, each chunk), runs
under one deadline, TIMEOUT_SECONDS, after which the connection is closed, however slowly the bytes
trickle. The read is asynchronous, so a slow endpoint holds no thread; the response is at most
MAX_BODY_BYTES, with a bounded head, follows no redirects, uses no proxy and is never decoded
here (contract/exposition.py reads it, off the event loop). Errors never quote what the server sent.
"""

from __future__ import annotations

import asyncio
import functools
import re
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

from longctx_trainer.contract.exposition import MAX_BODY_BYTES, MetricsUnreadable

from .kube import user_agent

_user_agent = functools.cache(user_agent)

TIMEOUT_SECONDS = 2.0
"""The whole read, connection to last byte."""
MAX_HEAD_LINE_BYTES = 8192
MAX_HEAD_LINES = 100
"""Status and header lines of the response, interim responses included."""
MAX_CHUNKS = 10_000
"""Chunks of a chunked body (a server sends a few); more make it unreadable."""
_CHUNK_SIZE = re.compile(rb"([0-9a-fA-F]{1,8})[ \t]*(?:;[^\n]*)?\r?")


@dataclass(frozen=True)
class Response:
    body: bytes
    """As sent: a chunked body still has its chunk framing (exposition.dechunk)."""
    chunked: bool

    def payload(self) -> bytes:
        """The body without its chunk framing; raises MetricsUnreadable. Linear in the body's size,
        at most MAX_CHUNKS steps in Python: run it off the event loop."""
        return dechunk(self.body) if self.chunked else self.body


def dechunk(body: bytes) -> bytes:
    """The payload of an HTTP/1.1 chunked body read to its end; raises MetricsUnreadable when it is
    malformed, cut short, or has more than MAX_CHUNKS chunks."""
    payload, pos = [], 0
    for _ in range(MAX_CHUNKS):
        end = body.find(b"\n", pos, pos + 256)
        size = _CHUNK_SIZE.fullmatch(body, pos, end) if end >= 0 else None
        if size is None:
            raise MetricsUnreadable("malformed chunked body")
        start, stop = end + 1, end + 1 + int(size[1], 16)
        if stop == start:
            return b"".join(payload)
        if body.startswith(b"\r\n", stop):
            pos = stop + 2
        elif body.startswith(b"\n", stop):
            pos = stop + 1
        else:
            raise MetricsUnreadable("malformed chunked body")
        payload.append(body[start:stop])
    raise MetricsUnreadable(f"more than {MAX_CHUNKS} chunks in the body")


@dataclass(frozen=True)
class _Target:
    host: str
    port: int
    tls: bool
    request: bytes


def _target(url: str) -> _Target:
    if not url.startswith(("http://", "https://")):
        raise MetricsUnreadable("only http and https URLs are read")
    if not url.isascii() or any(c <= " " or c == "\x7f" for c in url):
        raise MetricsUnreadable("the URL has spaces, control or non-ASCII characters")
    parts = urlsplit(url)
    try:
        host, port = parts.hostname, parts.port
    except ValueError:
        host = None
    if not host:
        raise MetricsUnreadable("the URL has no valid host")
    tls = parts.scheme == "https"
    port = port or (443 if tls else 80)
    authority = f"[{host}]" if ":" in host else host
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {authority}:{port}\r\nUser-Agent: {_user_agent()}\r\n"
        "Accept: text/plain;version=0.0.4\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    )
    return _Target(host, port, tls, request.encode())


@functools.cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


async def _head(reader: asyncio.StreamReader) -> dict[bytes, bytes]:
    """The headers of the final response (interim 1xx responses skipped); refuses any status but 200."""
    lines = 0

    async def line() -> bytes:
        nonlocal lines
        lines += 1
        if lines > MAX_HEAD_LINES:
            raise MetricsUnreadable(f"more than {MAX_HEAD_LINES} status and header lines")
        return (await reader.readuntil(b"\n")).rstrip(b"\r\n")

    while True:
        status = (await line()).split(None, 2)
        if len(status) < 2 or not status[0].startswith(b"HTTP/1.") or not status[1].isdigit():
            raise MetricsUnreadable("not an HTTP/1 response")
        headers = {}
        while header := await line():
            name, _, value = header.partition(b":")
            headers[name.strip().lower()] = value.strip()
        code = int(status[1])
        if 100 <= code < 200 and code != 101:
            continue  # interim: bounded by the line count and the deadline
        if 300 <= code < 400:
            raise MetricsUnreadable(f"status {code}: redirects are not followed")
        if code != 200:
            raise MetricsUnreadable(f"status {code}")
        return headers


async def _response(reader: asyncio.StreamReader, limit: int) -> Response:
    headers = await _head(reader)
    if headers.get(b"content-encoding", b"identity").lower() != b"identity":
        raise MetricsUnreadable("compressed responses are not read")
    chunked = b"chunked" in headers.get(b"transfer-encoding", b"").lower()
    length = headers.get(b"content-length")
    if length is not None and not chunked:
        if not length.isdigit() or len(length) > 12:
            raise MetricsUnreadable("invalid Content-Length")
        if int(length) > limit:
            raise MetricsUnreadable(f"response larger than {limit} bytes")
        return Response(await reader.readexactly(int(length)), chunked=False)
    body = bytearray()  # to the end: the request asked the server to close
    while len(body) <= limit and (more := await reader.read(limit + 1 - len(body))):
        body += more
    if len(body) > limit:
        raise MetricsUnreadable(f"response larger than {limit} bytes")
    return Response(bytes(body), chunked)


class NotListening(MetricsUnreadable):
    """The connection was refused: no exporter listens at the endpoint, as while a trainer
    restarts in its pod. Such a read costs the operator one connect."""


async def fetch_metrics(url: str, limit: int = MAX_BODY_BYTES, timeout: float = TIMEOUT_SECONDS) -> Response:
    """The response to GET `url`, at most `limit` bytes of body, all of it within `timeout`
    seconds; raises MetricsUnreadable (NotListening when the connection is refused)."""
    target = _target(url)
    writer = None
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(
                target.host,
                target.port,
                ssl=_tls_context() if target.tls else None,
                limit=MAX_HEAD_LINE_BYTES,
            )
            writer.write(target.request)
            await writer.drain()
            return await _response(reader, limit)
    except TimeoutError:
        raise MetricsUnreadable(f"no complete response within {timeout:g} s") from None
    except ssl.SSLError as e:  # before ValueError: a certificate error is both
        raise MetricsUnreadable(f"TLS: {e.reason or type(e).__name__}") from None
    except asyncio.IncompleteReadError:
        raise MetricsUnreadable("the response ended early") from None
    except (asyncio.LimitOverrunError, ValueError):  # readuntil past the stream's limit
        raise MetricsUnreadable(f"a status or header line longer than {MAX_HEAD_LINE_BYTES} bytes") from None
    except ConnectionRefusedError:
        raise NotListening("connection refused: nothing listens there") from None
    except OSError as e:  # unreachable, reset, TLS
        raise MetricsUnreadable(f"{type(e).__name__}: {e.strerror or e.errno or ''}") from None
    finally:
        if writer is not None:
            writer.transport.abort()
