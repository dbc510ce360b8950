"""Generate the LongContextJob CustomResourceDefinition from the pydantic models.

The JSON schema pydantic emits is turned into a Kubernetes structural OpenAPI v3 schema: $refs are
inlined, Optional[X] becomes a non-required X, exclusive bounds take the OpenAPI v3.0 form, titles go,
and each object gets the CEL rules of its scope from `rules.py`.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..names import GROUP, KIND, PLURAL, SINGULAR, VERSION
from .rules import rules_at
from .spec import LongContextJobSpec
from .status import LongContextJobStatus

SHORT_NAMES = ["lcj"]
CATEGORIES = ["longctx", "all"]
CRD_NAME = f"{PLURAL}.{GROUP}"

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Reason", "type": "string", "jsonPath": ".status.reason", "description": "Why the job is in its phase"},
    {"name": "Nodes", "type": "integer", "jsonPath": ".spec.resources.nodes"},
    {"name": "DP", "type": "integer", "jsonPath": ".status.layout.data", "description": "Data-parallel degree"},
    {
        "name": "CP",
        "type": "integer",
        "jsonPath": ".status.layout.context",
        "description": "Context-parallel group size",
    },
    {"name": "TP", "type": "integer", "jsonPath": ".status.layout.tensor", "description": "Tensor-parallel group size"},
    {
        "name": "Attention",
        "type": "string",
        "jsonPath": ".status.layout.attention",
        "description": "The attention kind the trainer runs (the planner's choice under attention: auto)",
    },
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
    {"name": "Tokens/s", "type": "number", "jsonPath": ".status.progress.tokensPerSecond"},
    {"name": "Done %", "type": "number", "jsonPath": ".status.progress.percentComplete"},
    {"name": "ETA", "type": "string", "jsonPath": ".status.progress.eta"},
    {"name": "Restarts", "type": "integer", "jsonPath": ".status.restarts"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Est. Tokens/s",
        "type": "number",
        "jsonPath": ".status.layout.estimatedTokensPerSecond",
        "description": "The planner's estimate, against the measured Tokens/s",
        "priority": 1,
    },
    {
        "name": "Memory/GPU",
        "type": "string",
        "jsonPath": ".status.layout.memoryPerGpu",
        "description": "Planned device memory per GPU",
        "priority": 1,
    },
    {
        "name": "Resumed From",
        "type": "integer",
        "jsonPath": ".status.progress.resumedFromStep",
        "description": "The checkpoint step the running ranks resumed from",
        "priority": 1,
    },
    {
        "name": "Checkpoint",
        "type": "integer",
        "jsonPath": ".status.progress.lastCheckpointStep",
        "description": "Step of the latest checkpoint",
        "priority": 1,
    },
    {
        "name": "Checkpoint Age",
        "type": "date",
        "jsonPath": ".status.progress.lastCheckpointTime",
        "description": "How long ago the latest checkpoint was written",
        "priority": 1,
    },
    {
        "name": "Last Restart",
        "type": "string",
        "jsonPath": ".status.lastRestart.reason",
        "description": "Why the gang last stopped and started again",
        "priority": 1,
    },
    {
        "name": "In Place",
        "type": "integer",
        "jsonPath": ".status.progress.inPlaceRestarts",
        "description": "In-place restarts of the current generation (restartPolicy.inPlace)",
        "priority": 1,
    },
    {"name": "Message", "type": "string", "jsonPath": ".status.message", "priority": 1},
]

_DROPPED_KEYS = {"title", "additionalProperties", "$defs", "patternProperties", "propertyNames"}


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


def _structural(node: dict, defs: dict, scope: str | None) -> dict:
    """Convert one pydantic JSON-schema node; scope is the dotted path for CEL rules (or None)."""
    node = dict(node)
    if "$ref" in node:
        target = defs[node.pop("$ref").rsplit("/", 1)[-1]]
        merged = dict(target)
        merged.update({k: v for k, v in node.items() if k in ("description", "default")})
        node = merged
    if "anyOf" in node:
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union at {scope}: {options}")
        inner = options[0]
        node = {**inner, **{k: v for k, v in node.items() if k != "default" or v is not None}}
        if "$ref" in node:
            return _structural(node, defs, scope)
    out: dict[str, Any] = {}
    if node.get("default", None) is not None:
        # An object's default is pydantic's default without its nulls: the API server checks
        # defaults against the CEL rules too, so an empty {} would fail rules reading its fields.
        out["default"] = _without_nulls(node["default"]) if "properties" in node else node["default"]
    if "description" in node:
        out["description"] = " ".join(node["description"].split())
    if "const" in node:
        node["enum"] = [node.pop("const")]
        node.setdefault("type", "string")
    for key, value in node.items():
        if key in _DROPPED_KEYS or key in (
            "default",
            "description",
            "properties",
            "items",
            "required",
            "exclusiveMinimum",
            "exclusiveMaximum",
        ):
            continue
        out[key] = value
    if "exclusiveMinimum" in node:
        out["minimum"], out["exclusiveMinimum"] = node["exclusiveMinimum"], True
    if "exclusiveMaximum" in node:
        out["maximum"], out["exclusiveMaximum"] = node["exclusiveMaximum"], True
    if node.get("type") == "object" and "properties" in node:
        out["properties"] = {
            name: _structural(prop, defs, f"{scope}.{name}" if scope else None)
            for name, prop in node["properties"].items()
        }
        if node.get("required"):
            out["required"] = list(node["required"])
    elif node.get("type") == "object" and isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = _structural(node["additionalProperties"], defs, None)
    elif node.get("type") == "object" and "patternProperties" in node:
        # A map with constrained keys: structural schemas have no patternProperties or
        # propertyNames, so the values get additionalProperties and the keys a CEL rule.
        ((key_pattern, value),) = node["patternProperties"].items()
        out["additionalProperties"] = _structural(value, defs, None)
        max_key = (node.get("propertyNames") or {}).get("maxLength")
        rule = f"self.all(k, k.matches(r'{key_pattern}')" + (f" && k.size() <= {max_key})" if max_key else ")")
        out.setdefault("x-kubernetes-validations", []).append(
            {
                "rule": rule,
                "message": f"keys must match {key_pattern}"
                + (f" and be at most {max_key} characters" if max_key else ""),
            }
        )
    if node.get("type") == "array":
        out["items"] = _structural(node["items"], defs, None)
    if scope is not None and rules_at(scope):
        out.setdefault("x-kubernetes-validations", []).extend(r.to_cel() for r in rules_at(scope))
    return out


def _schema_of(model, scope: str | None) -> dict:
    raw = model.model_json_schema(by_alias=True)
    return _structural(raw, raw.get("$defs", {}), scope)


def openapi_schema() -> dict:
    spec = _schema_of(LongContextJobSpec, "spec")
    status = _schema_of(LongContextJobStatus, None)
    status["properties"]["conditions"]["x-kubernetes-list-type"] = "map"
    status["properties"]["conditions"]["x-kubernetes-list-map-keys"] = ["type"]
    return {
        "type": "object",
        "description": "LongContextJob trains a long-context LLM across a gang of GPU nodes.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [r.to_cel() for r in rules_at("")],
    }


def crd() -> dict:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/part-of": "longctx"}},
        "spec": {
            "group": GROUP,
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": SHORT_NAMES,
                "categories": CATEGORIES,
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {"openAPIV3Schema": openapi_schema()},
                }
            ],
        },
    }


def crd_yaml() -> str:
    header = "# GENERATED by `longctx crd` from the pydantic models in operator/api. Do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=100)
