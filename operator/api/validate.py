"""Offline validation of a LongContextJob manifest: schema first, then the cross-field rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .rules import RULES
from .spec import LongContextJob


@dataclass(frozen=True)
class Problem:
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class InvalidJob(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("; ".join(map(str, problems)))


def _field(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out.lstrip(".") or "(root)"


def _message(error: dict) -> str:
    if error["type"] == "extra_forbidden":
        return "unknown field"
    if error["type"] == "missing":
        return "required field is missing"
    return error["msg"]


def _scoped(obj: Any, scope: str) -> Any:
    for name in filter(None, scope.split(".")):
        obj = getattr(obj, name)
    return obj


def problems(manifest: Any) -> list[Problem]:
    """Every problem found in the manifest, each naming its field; empty when valid."""
    if not isinstance(manifest, dict):
        return [Problem("(root)", "a LongContextJob manifest must be a YAML mapping")]
    try:
        job = LongContextJob.model_validate(manifest)
    except ValidationError as e:
        return [Problem(_field(err["loc"]), _message(err)) for err in e.errors()]
    found = []
    for rule in RULES:
        if rule.check is None:
            continue  # transition rules need the old object: only the API server judges them
        target = manifest if rule.scope == "" else _scoped(job, rule.scope)
        if not rule.check(target):
            found.append(Problem(rule.field, rule.message))
    return found


def parse_job(manifest: Any) -> LongContextJob:
    """The parsed job, or InvalidJob listing every problem."""
    found = problems(manifest)
    if found:
        raise InvalidJob(found)
    return LongContextJob.model_validate(manifest)
