"""Alert rules: promtool accepts them, their promtool unit tests pass, the chart ships the same file."""

import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "longctx.rules.yaml"
RULE_TESTS = ROOT / "alerts" / "tests" / "longctx.test.yaml"
CHART_RULES = ROOT / "charts" / "longctx" / "files" / "longctx.rules.yaml"
REQUIRED_ALERTS = {"LongctxJobStalled", "LongctxJobRestartsRising", "LongctxMFUDrop", "LongctxCheckpointTooOld"}


@pytest.fixture(scope="module")
def promtool() -> str:
    """Debian's promtool, installed by hack/prometheus when missing."""
    bin_dir = subprocess.run([str(ROOT / "hack" / "prometheus")], check=True, capture_output=True,
                             text=True).stdout.strip()
    return str(Path(bin_dir) / "promtool")


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_promtool_check_rules_accepts_the_rules(promtool):
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in result.stdout


def test_promtool_unit_tests_pass(promtool):
    result = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULE_TESTS.parent,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_every_required_alert_exists_with_severity_and_text():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert REQUIRED_ALERTS <= rules.keys()
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"].strip() and rule["annotations"]["description"].strip(), name


def test_every_alert_has_a_firing_and_a_silent_unit_test():
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
             for case in test["alert_rule_test"]]
    for name in {rule["alert"] for rule in alert_rules()}:
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name}: no test where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{name}: no test where it stays silent"


def test_chart_ships_the_same_rules_file():
    assert CHART_RULES.read_bytes() == RULES.read_bytes(), (
        f"{CHART_RULES.relative_to(ROOT)} differs from {RULES.relative_to(ROOT)}: copy it over")
