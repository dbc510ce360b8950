"""promtool (Debian's Prometheus, installed by hack/prometheus) on the alert rules, their unit
tests, and every dashboard query."""

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "longctx.rules.yaml"
RULE_TESTS = ROOT / "alerts" / "tests" / "longctx.test.yaml"
DASHBOARD = ROOT / "dashboards" / "longctx.json"
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$namespace": ".*", "$job": ".*"}


@pytest.fixture(scope="module")
def promtool() -> str:
    bin_dir = subprocess.run(
        [str(ROOT / "hack" / "prometheus")], check=True, capture_output=True, text=True
    ).stdout.strip()
    return str(Path(bin_dir) / "promtool")


def alert_rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


def test_promtool_check_rules_accepts_the_rules(promtool):
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool):
    result = subprocess.run(
        [promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_dashboard_query_is_valid_promql(promtool, tmp_path):
    """promtool parses each query (Grafana's variables substituted) as a recording rule."""
    board = json.loads(DASHBOARD.read_text())
    panels = [panel for panel in board["panels"] if panel["type"] != "row"]
    queries = [target["expr"] for panel in panels for target in panel["targets"]]
    # A variable's label_values(SELECTOR, LABEL) is checked through its selector.
    queries += [
        re.fullmatch(r"label_values\((.*), \w+\)", variable["query"]).group(1)
        for variable in board["templating"]["list"]
        if variable["type"] == "query"
    ]
    rules = []
    for index, query in enumerate(queries):
        for name, value in GRAFANA_VARIABLES.items():
            query = query.replace(name, value)
        rules.append({"record": f"dashboard:query_{index}", "expr": query})
    path = tmp_path / "queries.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout
