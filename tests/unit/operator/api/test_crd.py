"""The CRD in crds/ is generated from the API models, structural, and documented."""

from pathlib import Path

import yaml

from longctx_operator.api.crd import crd, crd_yaml
from longctx_operator.api.rules import RULES

ROOT = Path(__file__).resolve().parents[4]
CRD_FILE = ROOT / "crds" / "longctx.io_longcontextjobs.yaml"


def _schema():
    return crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_checked_in_crd_is_not_stale():
    assert CRD_FILE.read_text() == crd_yaml(), "crds/ is stale: run hack/generate"


def test_schema_is_structural():
    """No leftovers of JSON Schema composition, and every property schema has a type."""

    def visit(node, path):
        assert not {"$ref", "anyOf", "oneOf", "allOf", "$defs", "title"} & set(node), path
        assert "type" in node, path
        if "properties" in node:
            assert node["type"] == "object" and "additionalProperties" not in node, path
            for name, prop in node["properties"].items():
                visit(prop, f"{path}.{name}")
        if "items" in node:
            visit(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            visit(node["additionalProperties"], f"{path}{{}}")

    visit(_schema(), "")


def test_every_spec_field_has_a_description():
    spec = _schema()["properties"]["spec"]
    missing = []

    def visit(node, path):
        for name, prop in node.get("properties", {}).items():
            if not prop.get("description") and not path.endswith("tolerations[]") and not path.endswith("env[]"):
                missing.append(f"{path}.{name}")
            visit(prop, f"{path}.{name}")
        if "items" in node:
            visit(node["items"], f"{path}[]")

    visit(spec, "spec")
    assert missing == []


def test_every_rule_is_in_the_crd_once():
    text = yaml.safe_dump(_schema())
    for rule in RULES:
        assert text.count(yaml.safe_dump(rule.cel).split("\n")[0][:60]) >= 1, rule.cel


def test_printer_columns_and_names():
    version = crd()["spec"]["versions"][0]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == [
        "Phase",
        "Reason",
        "Nodes",
        "DP",
        "CP",
        "TP",
        "Attention",
        "Step",
        "Tokens/s",
        "Done %",
        "ETA",
        "Restarts",
        "Age",
        "Est. Tokens/s",
        "Memory/GPU",
        "Resumed From",
        "Checkpoint",
        "Checkpoint Age",
        "Last Restart",
        "In Place",
        "Message",
    ]
    wide = [c["name"] for c in version["additionalPrinterColumns"] if c.get("priority")]
    assert wide == columns[columns.index("Est. Tokens/s") :]  # kubectl get lcj -o wide adds the rest
    assert version["subresources"] == {"status": {}}
    names = crd()["spec"]["names"]
    assert names["shortNames"] == ["lcj"] and "longctx" in names["categories"]


def test_api_reference_doc_is_not_stale():
    from longctx_operator.api.reference import reference_markdown

    assert (ROOT / "docs" / "api-reference.md").read_text() == reference_markdown(), (
        "docs/api-reference.md is stale: run hack/generate"
    )
