"""Every longctx_* series the dashboard and the alert rules query is one the trainer's exporter or
the operator actually exports (catches typos and renames on either side)."""

import json
import re
from pathlib import Path

import yaml
from prometheus_client.metrics import MetricWrapperBase

from longctx_operator import metrics as operator_metrics
from longctx_trainer.contract.metrics import TrainMetrics

ROOT = Path(__file__).resolve().parents[2]
SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def series_names(collectors) -> set[str]:
    """Sample names as Prometheus stores them (counter _total, histogram _bucket/_sum/_count)."""
    return {
        family.name + suffix
        for collector in collectors
        for family in collector.collect()
        for suffix in SUFFIXES[family.type]
    }


def exported() -> set[str]:
    trainer = TrainMetrics(job="probe", rank=0)
    operator = [value for value in vars(operator_metrics).values() if isinstance(value, MetricWrapperBase)]
    return series_names([trainer.registry]) | series_names(operator)


def queried() -> dict[str, str]:
    """Each longctx_* name used by a dashboard query or an alert, with where it is used."""
    board = json.loads((ROOT / "dashboards" / "longctx.json").read_text())
    sources = [
        (f"panel {panel['title']!r}", target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]
    sources += [
        (f"variable {variable['name']}", variable["query"])
        for variable in board["templating"]["list"]
        if variable["type"] == "query"
    ]
    groups = yaml.safe_load((ROOT / "alerts" / "longctx.rules.yaml").read_text())["groups"]
    sources += [(f"alert {rule['alert']}", rule["expr"]) for group in groups for rule in group["rules"]]
    return {name: where for where, expr in sources for name in re.findall(r"\blongctx_\w+", expr)}


def test_dashboard_and_alerts_query_only_exported_series():
    names = queried()
    assert len(names) >= 10
    missing = {name: where for name, where in names.items() if name not in exported()}
    assert not missing, f"queried but not exported: {missing}"


def test_every_dcgm_series_queried_is_a_known_exporter_field():
    """DCGM names come from NVIDIA's exporter, not from us: they are kept as data with where the
    exporter enables them (dashboards/dcgm_fields.yaml), and every one queried must be listed."""
    known = yaml.safe_load((ROOT / "dashboards" / "dcgm_fields.yaml").read_text())["fields"]
    board = (ROOT / "dashboards" / "longctx.json").read_text()
    rules = (ROOT / "alerts" / "longctx.rules.yaml").read_text()
    used = set(re.findall(r"\bDCGM_FI_\w+", board + rules))
    assert used and used <= known.keys(), sorted(used - known.keys())
    counters = {name for name, field in known.items() if field["type"] == "counter"}
    gauges_under_rate = {name for name in used - counters if re.search(rf"(rate|increase)\({name}\b", board)}
    assert not gauges_under_rate, gauges_under_rate
