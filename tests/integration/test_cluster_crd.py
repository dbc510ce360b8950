"""The generated LongContextJob CRD on the real API server: it installs, documents itself through
`kubectl explain`, accepts every example and rejects malformed jobs naming the field; what
`longctx render` prints is accepted by the server too."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from longctx_operator.api.crd import CRD_NAME
from support import operator_harness as h
from support.manifests import EXAMPLES, apply_case, malformed_cases

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def crd(admin_kubectl):
    h.install_crd(admin_kubectl)
    return yaml.safe_load(h.CRD.read_text())


def words(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def test_crd_is_established_with_its_printer_columns(crd, admin_kubectl):
    served = admin_kubectl.json("get", "crd", CRD_NAME)
    assert {c["type"]: c["status"] for c in served["status"]["conditions"]}["Established"] == "True"
    columns = [c["name"] for c in served["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]


def test_kubectl_explain_shows_the_field_descriptions(crd, admin_kubectl, wait_until):
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]

    def explain():  # the server publishes a new CRD's OpenAPI a moment after it is Established
        result = admin_kubectl.run("explain", "longcontextjobs.spec", check=False)
        return result.stdout if result.returncode == 0 else None

    explained = words(wait_until(explain, timeout=60, what="kubectl explain to know the CRD"))
    assert words(spec_schema["description"]) in explained
    for field, schema in spec_schema["properties"].items():
        assert field in explained
        if "description" in schema:
            assert words(schema["description"]) in explained, field


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_accepted_and_stored(crd, kubectl, example: Path):
    kubectl.run("create", "-f", str(example))
    name = yaml.safe_load(example.read_text())["metadata"]["name"]
    stored = kubectl.json("get", "lcj", name)
    assert stored["spec"]["sequenceLength"] == yaml.safe_load(example.read_text())["spec"]["sequenceLength"]


BASE, CASES = malformed_cases()


@pytest.mark.parametrize("case", [pytest.param(c, id=c["name"]) for c in CASES if c.get("only") != "validate"])
def test_server_rejects_malformed_job_naming_the_field(crd, admin_kubectl, case):
    manifest = yaml.safe_dump(apply_case(BASE, case))
    result = admin_kubectl.run(
        "create", "--namespace", "default", "--dry-run=server", "-f", "-", input=manifest, check=False
    )
    assert result.returncode != 0, "the API server accepted it"
    assert case["field"] in result.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_workload_passes_server_dry_run(crd, kubectl, example: Path):
    longctx = Path(sys.executable).with_name("longctx")
    rendered = subprocess.run(
        [str(longctx), "render", str(example), "--namespace", kubectl.namespace],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    kinds = [doc["kind"] for doc in yaml.safe_load_all(rendered) if doc]
    assert "Job" in kinds and "Service" in kinds
    kubectl.run("apply", "--dry-run=server", "-f", "-", input=rendered)


@pytest.mark.parametrize(
    "patch,needle",
    [
        ({"spec": {"model": {"preset": "125m"}}}, "model is immutable"),
        ({"spec": {"sequenceLength": 65536}}, "sequenceLength and globalBatchTokens are immutable"),
        ({"spec": {"globalBatchTokens": 524288}}, "sequenceLength and globalBatchTokens are immutable"),
        ({"spec": {"checkpoint": {"path": "/elsewhere"}}}, "checkpoint.path is immutable"),
    ],
)
def test_server_rejects_changes_to_immutable_fields(crd, kubectl, patch, needle):
    base, _ = malformed_cases()
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(base))
    name = base["metadata"]["name"]
    rejected = kubectl.run("patch", "lcj", name, "--type=merge", "-p", json.dumps(patch), check=False)
    assert rejected.returncode != 0 and needle in rejected.stderr, rejected.stderr
    kubectl.run("patch", "lcj", name, "--type=merge", "-p", '{"spec": {"steps": 7}}')  # mutable
    assert kubectl.json("get", "lcj", name)["spec"]["steps"] == 7
