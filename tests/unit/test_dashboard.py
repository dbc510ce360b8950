"""The Grafana dashboard: generated, checked in, embedded in the chart, and well-formed."""

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKED_IN = ROOT / "dashboards" / "longctx.json"
CHART_COPY = ROOT / "charts" / "longctx" / "dashboards" / "longctx.json"
REQUIRED_TITLES = {
    "Job throughput (tokens/s)",
    "Tokens/s per rank (stragglers)",
    "Step time p50 / p95",
    "Loss",
    "Model FLOPs utilisation",
    "Gang restarts",
    "Jobs by phase (operator-wide)",
    "Time since last checkpoint",
    "GPU utilisation",
    "Tensor core activity",
    "GPU memory used",
    "GPU power",
    "NVLink traffic",
    "Last XID error",
}
# Operator-wide panels: the operator's own metrics have no per-job labels.
OPERATOR_WIDE = {"Jobs by phase (operator-wide)", "Operator reconciles/s by result", "Admission wait p95"}


@pytest.fixture(scope="module")
def generator():
    spec = importlib.util.spec_from_file_location("dashboards_build", ROOT / "dashboards" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def board() -> dict:
    return json.loads(CHECKED_IN.read_text())


def panels(board: dict) -> list[dict]:
    return [panel for panel in board["panels"] if panel["type"] != "row"]


def test_checked_in_json_and_chart_copy_equal_generator_output(generator):
    text = generator.render()
    assert CHECKED_IN.read_text() == text, "dashboards/longctx.json is stale: run hack/generate"
    assert CHART_COPY.read_text() == text, "chart copy is stale: run hack/generate"


def test_check_mode_reports_a_stale_copy(generator, tmp_path, monkeypatch):
    stale = tmp_path / "longctx.json"
    stale.write_text("{}\n")
    monkeypatch.setattr(generator, "OUTPUTS", (CHECKED_IN, stale))
    assert generator.main(["--check"]) == 1
    stale.write_text(generator.render())
    assert generator.main(["--check"]) == 0


def test_every_panel_has_title_unit_and_queries(board):
    assert len(panels(board)) >= len(REQUIRED_TITLES)
    for panel in panels(board):
        assert panel["title"].strip(), panel["id"]
        assert panel["fieldConfig"]["defaults"]["unit"], panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["expr"].strip() and target["legendFormat"].strip(), panel["title"]
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_required_panels_present_with_unique_ids_and_grid(board):
    assert REQUIRED_TITLES <= {panel["title"] for panel in panels(board)}
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]


def test_namespace_and_job_variables_filter_every_job_query(board):
    variables = {variable["name"]: variable for variable in board["templating"]["list"]}
    assert {"datasource", "namespace", "job"} <= variables.keys()
    assert "job_name" in variables["job"]["query"] and "$namespace" in variables["job"]["query"]
    for panel in panels(board):
        if panel["title"] in OPERATOR_WIDE:
            continue
        for target in panel["targets"]:
            assert 'namespace=~"$namespace"' in target["expr"], panel["title"]
            assert 'job_name=~"$job"' in target["expr"], panel["title"]


def test_gpu_panels_join_dcgm_on_pod(board):
    for panel in panels(board):
        for target in panel["targets"]:
            if "DCGM_" in target["expr"]:
                assert re.search(r"on \(namespace, pod\) group_left", target["expr"]), panel["title"]
