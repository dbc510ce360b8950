"""Build manifests for tests: the malformed cases of tests/data/malformed.yaml and the examples."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))


def _walk(doc: dict, dotted: str) -> tuple[dict, str]:
    *parents, leaf = dotted.split(".")
    for name in parents:
        doc = doc.setdefault(name, {})
    return doc, leaf


def apply_case(base: dict, case: dict) -> dict:
    doc = copy.deepcopy(base)
    for dotted, value in case.get("set", {}).items():
        parent, leaf = _walk(doc, dotted)
        parent[leaf] = copy.deepcopy(value)
    for dotted in case.get("unset", []):
        parent, leaf = _walk(doc, dotted)
        parent.pop(leaf)
    return doc


def malformed_cases() -> tuple[dict, list[dict]]:
    data = yaml.safe_load((ROOT / "tests" / "data" / "malformed.yaml").read_text())
    return data["base"], data["cases"]


def load_example(path: Path) -> dict:
    return yaml.safe_load(path.read_text())
