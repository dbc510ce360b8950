"""The kubelet's container-log endpoint for simulated nodes, so `pods/log` works on KWOK pods.

KWOK's pods have no containers and this cluster's KWOK serves no kubelet API, so the API server
has nowhere to read their logs. Nodes created with InternalIP 127.0.0.1 and this server's port as
their kubelet endpoint send it the API server's `GET /containerLogs/<namespace>/<pod>/<container>`
requests (over TLS; the API server does not check a kubelet's certificate unless
--kubelet-certificate-authority is set). It answers like a kubelet: a pod's lines
("<pod> line <i>"), `tailLines` honoured, and with `follow=true` the stream stays open until the pod's
container ends or the pod is gone, as a kubelet's does, then ends with "<pod> exited".
"""

from __future__ import annotations

import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LINES = 3


def lines(pod: str) -> list[str]:
    """What the container of `pod` has written before any follow ends."""
    return [f"{pod} line {i}" for i in range(LINES)]


class KubeletLogs:
    """Serves container logs on 127.0.0.1:<port>; `finished(namespace, pod)` says when a followed
    stream ends (the container terminated or the pod is gone)."""

    def __init__(self, workdir: Path, finished: Callable[[str, str], bool]):
        cert, key = workdir / "kubelet.crt", workdir / "kubelet.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=fake-kubelet"]
            + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
            check=True,
            capture_output=True,
        )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                url = urllib.parse.urlsplit(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) != 4 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                _, namespace, pod, _container = parts
                query = urllib.parse.parse_qs(url.query)
                server.requests.append(self.path)
                text = lines(pod)
                if "tailLines" in query:
                    text = text[len(text) - int(query["tailLines"][0]) :] if int(query["tailLines"][0]) else []
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write("".join(f"{line}\n" for line in text).encode())
                self.wfile.flush()
                if query.get("follow") == ["true"]:
                    while not finished(namespace, pod):
                        time.sleep(0.5)
                    self.wfile.write(f"{pod} exited\n".encode())

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def node_status(self) -> dict:
        """The node status fields that send the API server's log requests here."""
        return {
            "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": self.port}},
        }

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
