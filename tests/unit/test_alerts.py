"""Alert rules: every required alert with severity and text, a firing and a silent promtool case
each, and the chart ships the same file (promtool itself runs them in
tests/integration/test_promtool.py)."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "alerts" / "longctx.rules.yaml"
RULE_TESTS = ROOT / "alerts" / "tests" / "longctx.test.yaml"
CHART_RULES = ROOT / "charts" / "longctx" / "files" / "longctx.rules.yaml"
REQUIRED_ALERTS = {
    "LongctxJobStalled",
    "LongctxJobRestartsRising",
    "LongctxMFUDrop",
    "LongctxCheckpointTooOld",
    "LongctxStraggler",
}


def alert_rules() -> list[dict]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def test_every_required_alert_exists_with_severity_and_text():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    assert REQUIRED_ALERTS <= rules.keys()
    for name, rule in rules.items():
        assert rule["labels"]["severity"] in {"warning", "critical"}, name
        assert rule["annotations"]["summary"].strip() and rule["annotations"]["description"].strip(), name


def test_every_alert_has_a_firing_and_a_silent_unit_test():
    cases = [case for test in yaml.safe_load(RULE_TESTS.read_text())["tests"] for case in test["alert_rule_test"]]
    for name in {rule["alert"] for rule in alert_rules()}:
        mine = [case for case in cases if case["alertname"] == name]
        assert any(case["exp_alerts"] for case in mine), f"{name}: no test where it fires"
        assert any(not case["exp_alerts"] for case in mine), f"{name}: no test where it stays silent"


def test_chart_ships_the_same_rules_file():
    assert CHART_RULES.read_bytes() == RULES.read_bytes(), (
        f"{CHART_RULES.relative_to(ROOT)} differs from {RULES.relative_to(ROOT)}: run hack/generate"
    )
