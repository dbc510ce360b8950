"""Condition types and reasons are wire values with one home (operator/conditions.py and
operator/reasons.py): every copy that must exist elsewhere, the docs and the chart's notes, is
tied to it here, so renaming or adding one fails a test until the copies follow."""

import ast
import re
from pathlib import Path
from typing import get_args

import pytest

from longctx_operator import conditions, reasons
from longctx_operator.api.status import Condition, Phase

ROOT = Path(__file__).resolve().parents[3]
OPERATOR_MD = ROOT / "docs" / "operator.md"
TYPES = set(get_args(conditions.ConditionType))
REASONS = set(get_args(reasons.Reason))
# What users read about jobs; docs/cluster.md names the simulated kubelet's own pod reasons.
USER_TEXTS = [
    ROOT / "README.md",
    *(ROOT / "docs" / f"{name}.md" for name in ("operator", "observability", "security", "architecture")),
    ROOT / "charts" / "longctx" / "README.md",
    ROOT / "charts" / "longctx" / "values.yaml",
    ROOT / "charts" / "longctx" / "templates" / "NOTES.txt",
]
NAMED_REASON = re.compile(r"\b(?:reason|Event)s?\s+`?([A-Z][A-Za-z]+)`?")
NAMED_CONDITION = re.compile(r"`([A-Z][A-Za-z]+)=(?:True|False)`")
BACKQUOTED = re.compile(r"`([A-Za-z]+)`")


def constants(module) -> list[str]:
    return [value for name, value in vars(module).items() if name.isupper() and isinstance(value, str)]


@pytest.mark.parametrize(("module", "values"), [(conditions, TYPES), (reasons, REASONS)], ids=["types", "reasons"])
def test_every_value_of_the_literal_is_exactly_one_constant(module, values):
    assert sorted(constants(module)) == sorted(values)


def lifecycle_section() -> str:
    return OPERATOR_MD.read_text().split("\n## Lifecycle\n", 1)[1].split("\n## ", 1)[0]


def condition_table() -> dict[str, list[str]]:
    """Each condition of docs/operator.md's table with the reasons of its True and False columns."""
    section = lifecycle_section()
    rows = section.split("\n| condition | True | False |\n|---|---|---|\n", 1)[1].split("\n\n", 1)[0]
    cells = [row.strip("|").split("|") for row in rows.splitlines()]
    return {BACKQUOTED.fullmatch(first.strip())[1]: BACKQUOTED.findall("".join(rest)) for first, *rest in cells}


def test_the_condition_table_lists_every_condition_type_with_real_reasons():
    table = condition_table()
    assert set(table) == TYPES and len(table) == len(TYPES)
    unknown = sorted({r for named in table.values() for r in named} - REASONS)
    assert not unknown, f"in docs/operator.md's condition table, not in operator/reasons.py: {unknown}"


def test_the_lifecycle_docs_name_every_reason():
    named = set(BACKQUOTED.findall(lifecycle_section()))
    assert not REASONS - named, f"not in docs/operator.md's Lifecycle: {sorted(REASONS - named)}"


def test_the_event_example_shows_real_reasons():
    block = lifecycle_section().split("\n```\n", 2)[1]
    shown = [line.split()[1] for line in block.splitlines() if line.split()[:1] in (["Normal"], ["Warning"])]
    assert shown, "no Event in the example: the check would pass vacuously"
    assert not set(shown) - REASONS, sorted(set(shown) - REASONS)


def test_every_reason_and_condition_users_read_about_is_real():
    reasons_named = {(t.name, m) for t in USER_TEXTS for m in NAMED_REASON.findall(t.read_text())}
    conditions_named = {(t.name, m) for t in USER_TEXTS for m in NAMED_CONDITION.findall(t.read_text())}
    assert {"NOTES.txt", "values.yaml"} <= {name for name, _ in reasons_named}, "the patterns miss the chart"
    assert not {(t, r) for t, r in reasons_named if r not in REASONS}
    assert not {(t, c) for t, c in conditions_named if c not in TYPES}


def test_the_condition_models_description_names_real_types():
    """Condition's docstring is the CRD's description of status.conditions (`kubectl explain`)."""
    named = re.findall(r"[A-Z][A-Za-z]+", Condition.__doc__.split("(", 1)[1].split(")", 1)[0])
    assert named and set(named) <= TYPES


def test_no_other_operator_module_spells_a_type_or_reason():
    """Phases share words with conditions (Running, Failed, ...) and stay plain strings; any other
    condition type or reason is written through its constant."""
    words = (TYPES | REASONS) - set(get_args(Phase))
    homes = {ROOT / "operator" / "conditions.py", ROOT / "operator" / "reasons.py"}
    spelled = [
        (str(path.relative_to(ROOT)), node.lineno, node.value)
        for path in sorted((ROOT / "operator").rglob("*.py"))
        if path not in homes
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and node.value in words
    ]
    assert not spelled, spelled
