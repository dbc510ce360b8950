"""Reading manifests as the API server would: YAML that kubectl would refuse is refused here too.

PyYAML alone accepts what kubectl and the API server reject (duplicate keys, integers beyond
int64, .inf, binary values) and fails with a traceback on some input (nesting thousands of levels
deep, integers of thousands of digits). This loader and `value_problems` close both gaps, so
`longctx validate` never accepts what the server refuses and never crashes.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

MAX_DEPTH = 64
"""Nesting a manifest may have; a LongContextJob needs 6."""
MAX_VALUES = 100_000
"""Values (counting every alias expansion) a manifest may hold."""
MAX_BYTES = 3 * 2**20
"""Text size; etcd stores at most 1.5 MiB per object."""
MAX_NUMBER_CHARS = 64
INT64 = (-(2**63), 2**63 - 1)


class ManifestError(ValueError):
    """The text is not a manifest the API server could receive; the message says why (and where)."""


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys, deep nesting and giant numbers, and reads YAML
    timestamps as the strings kubectl sends."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise yaml.MarkedYAMLError(
                    problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=self.peek_event().start_mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if isinstance(key_node, yaml.ScalarNode):
                key = key_node.value
                if key in seen:
                    raise yaml.MarkedYAMLError(problem=f"duplicate key {key!r}", problem_mark=key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep)


def _bounded_number(constructor):
    def construct(loader, node):
        if len(node.value) > MAX_NUMBER_CHARS:
            raise yaml.MarkedYAMLError(problem=f"number of {len(node.value)} characters", problem_mark=node.start_mark)
        return constructor(loader, node)

    return construct


_Loader.add_constructor("tag:yaml.org,2002:int", _bounded_number(yaml.SafeLoader.construct_yaml_int))
_Loader.add_constructor("tag:yaml.org,2002:float", _bounded_number(yaml.SafeLoader.construct_yaml_float))


def load_documents(text: str) -> list[Any]:
    """The non-empty YAML documents of `text`; raises ManifestError naming the line."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise ManifestError(f"larger than {MAX_BYTES // 2**20} MiB")
    try:
        docs = [d for d in yaml.load_all(text, Loader=_Loader) if d is not None]
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" (line {mark.line + 1})" if mark else ""
        raise ManifestError(f"not valid YAML{where}: {_one_line(e.problem or e.context)}") from None
    except yaml.YAMLError as e:  # e.g. a character YAML does not allow, with its position
        raise ManifestError(f"not valid YAML: {_one_line(str(e))}") from None
    except RecursionError:
        raise ManifestError("not valid YAML: nested too deeply") from None
    for doc in docs:
        problem = next(iter(value_problems(doc)), None)
        if problem:
            raise ManifestError(f"{problem[0]}: {problem[1]}")
    return docs


def _one_line(text: str | None) -> str:
    return " ".join(str(text).split())


def field_part(key: str) -> str:
    """A map key as it appears in a field path: as written when plain, JSON-quoted otherwise, so a
    key holding line breaks or control characters cannot break the one-line error it is named in."""
    return key if key.isprintable() and key.isascii() and key else json.dumps(key)


def _path(parent: str, key: Any) -> str:
    return (
        f"{parent}[{key}]" if isinstance(key, int) else (f"{parent}.{field_part(key)}" if parent else field_part(key))
    )


def value_problems(doc: Any) -> list[tuple[str, str]]:
    """(field, problem) for each value JSON and the API server cannot carry: integers beyond int64,
    infinities and NaN, binary data, text that is not Unicode (lone surrogates), keys that are not
    strings; and a document too deep or too large. Iterative, so no input can exhaust the stack."""
    found: list[tuple[str, str]] = []
    stack: list[tuple[str, Any, int]] = [("", doc, 0)]
    count = 0
    while stack:
        path, value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            return found + [(path or "(root)", f"more than {MAX_VALUES} values")]
        if depth > MAX_DEPTH:
            return found + [(path or "(root)", f"nested more than {MAX_DEPTH} levels deep")]
        where = path or "(root)"
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, int):
            if not INT64[0] <= value <= INT64[1]:
                found.append((where, "integer out of range (64-bit)"))
        elif isinstance(value, float):
            if not math.isfinite(value):
                found.append((where, "must be a finite number"))
        elif isinstance(value, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
                found.append((where, "not valid Unicode (a lone surrogate)"))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    found.append((where, f"key {key!r} must be a string"))
                    continue
                stack.append((_path(path, key), item, depth + 1))
                if any(0xD800 <= ord(c) <= 0xDFFF for c in key):
                    found.append((where, "a key is not valid Unicode (a lone surrogate)"))
        elif isinstance(value, list):
            stack.extend((_path(path, i), item, depth + 1) for i, item in enumerate(value))
        else:
            found.append((where, f"{type(value).__name__} values are not allowed"))
    return found
