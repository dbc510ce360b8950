"""The LongctxStraggler alert fires in a real Prometheus (Debian's) on the trainer's own exporter
(trainer/contract/metrics.py): three ranks of one job, rank 1 twice as slow a step as the others; the rule
is the one in alerts/longctx.rules.yaml with its `for` shortened to a few seconds (promtool's unit
tests in alerts/tests/ cover the pending period)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from longctx_trainer.contract.metrics import TrainMetrics
from support.ports import free_port
from support.prometheus import Prometheus

pytestmark = [pytest.mark.integration]
ALERT_RULES = Path(__file__).resolve().parents[2] / "alerts" / "longctx.rules.yaml"


def straggler_rule(tmp_path: Path) -> Path:
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    [rule] = [r for g in groups for r in g["rules"] if r.get("alert") == "LongctxStraggler"]
    path = tmp_path / "straggler.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "straggler", "rules": [rule | {"for": "3s"}]}]}))
    return path


def test_the_straggler_alert_fires_for_the_slow_rank_only(tmp_path):
    ports = [free_port() for _ in range(3)]
    for rank, (port, seconds) in enumerate(zip(ports, (1.0, 2.0, 1.1), strict=True)):
        metrics = TrainMetrics("strag", rank)
        metrics.serve(port)
        metrics.observe_step(10, tokens=1024, seconds=seconds, loss=1.0, mfu={})
    targets = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "ml", "pod": f"strag-g1-{rank}"}}
        for rank, port in enumerate(ports)
    ]
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(straggler_rule(tmp_path))],
        "scrape_configs": [{"job_name": "longctx-trainers", "static_configs": targets}],
    }
    prometheus = Prometheus(tmp_path, config)
    try:
        deadline = time.monotonic() + 60
        while True:
            firing = [a for a in prometheus.api("alerts")["alerts"] if a["state"] == "firing"]
            if firing or time.monotonic() > deadline:
                break
            time.sleep(1)
        assert [(a["labels"]["alertname"], a["labels"]["rank"], a["labels"]["pod"]) for a in firing] == [
            ("LongctxStraggler", "1", "strag-g1-1")
        ]
        assert firing[0]["annotations"]["summary"] == "Rank 1 of ml/strag is a straggler"
    finally:
        prometheus.stop()
