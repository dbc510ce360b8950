"""Offline validation of a LongContextJob manifest: schema first, then the cross-field rules."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from .manifest import field_part, value_problems
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
        if isinstance(part, int):
            out += f"[{part}]"
        else:  # a user's map key may hold anything: keep the message on one readable line
            out += "." + field_part(str(part))
    return out.lstrip(".") or "(root)"


def _problem(error: dict) -> Problem:
    """A pydantic error as a Problem. A bad map key names the map, as the API server does (its
    CEL rule sits on the map), and quotes the key in the message."""
    loc, message = tuple(error["loc"]), _message(error)
    if "[key]" in loc:
        at = loc.index("[key]")
        loc, message = loc[: at - 1], f"key {json.dumps(str(loc[at - 1]))}: {message}"
    return Problem(_field(loc), message)


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
    if unsendable := value_problems(manifest):
        return [Problem(field, message) for field, message in unsendable]
    try:
        job = LongContextJob.model_validate(manifest)
    except ValidationError as e:
        return [_problem(err) for err in e.errors()]
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
