"""Debian's Prometheus (installed by hack/prometheus) on a scratch config and TSDB, for the tests
that scrape trainers: the integration scrape test and the real-node e2e test."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from support import processes
from support.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def prometheus_bin_dir() -> Path:
    """Where hack/prometheus installed the binary (it installs it first when missing)."""
    found = subprocess.run([str(REPO / "hack" / "prometheus")], check=True, capture_output=True, text=True)
    return Path(found.stdout.strip())


class Prometheus:
    """One Prometheus server listening on loopback only; `stop` ends it."""

    def __init__(self, workdir: Path, config: dict, start_timeout: float = 60):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        self.proc = subprocess.Popen(
            [
                str(prometheus_bin_dir() / "prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--log.level=warn",
            ],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + start_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2):
                    break
            except OSError as e:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise AssertionError(f"prometheus did not start: {self.log.read_text()[-2000:]}") from e
                time.sleep(0.3)

    def api(self, path: str, **params) -> dict:
        url = f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                body = json.load(response)
        except urllib.error.HTTPError as e:  # 400/422 carry the PromQL error in the body
            body = json.load(e)
        assert body["status"] == "success", f"{path} {params}: {body.get('errorType')}: {body.get('error')}"
        return body["data"]

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """An instant query, now or at the Unix time `at`."""
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        return self.api("query", **params)["result"]

    def stop(self) -> None:
        processes.stop(self.proc, timeout=30)
