"""hack/images/inputs.py: the chart's appVersion and the build-context paths of a Dockerfile's COPY
lines, which hack/images/build hashes into each image's key."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "images" / "inputs.py"


@pytest.fixture(scope="module")
def inputs():
    spec = importlib.util.spec_from_file_location("images_inputs", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_app_version_is_the_charts(inputs):
    chart = yaml.safe_load((ROOT / "charts" / "longctx" / "Chart.yaml").read_text())
    out = subprocess.run([sys.executable, str(SCRIPT), "app-version"], capture_output=True, text=True, check=True)
    assert out.stdout == f"{chart['appVersion']}\n"


def test_a_chart_without_app_version_is_refused(inputs, tmp_path):
    chart = tmp_path / "Chart.yaml"
    chart.write_text("name: longctx\nversion: 0.1.0\n")
    with pytest.raises(SystemExit, match="no appVersion"):
        inputs.app_version(chart)


def test_copied_sources_skip_stages_flags_and_destinations(inputs):
    dockerfile = """# syntax=docker/dockerfile:1
FROM base AS build
COPY --chown=1000:1000 pyproject.toml README.md ./
copy operator/ \\
     operator/
# COPY commented/ out/
COPY ["images/trainer/constraints.txt", "/tmp/constraints.txt"]
FROM base
COPY --from=build /opt/longctx /opt/longctx
"""
    assert inputs.copied_sources(dockerfile) == [
        "pyproject.toml",
        "README.md",
        "operator/",
        "images/trainer/constraints.txt",
    ]


@pytest.mark.parametrize("image", ["operator", "trainer"])
def test_the_images_copy_the_package_sources(inputs, image):
    sources = inputs.copied_sources((ROOT / "images" / image / "Dockerfile").read_text())
    assert sources == [f"images/{image}/constraints.txt", "pyproject.toml", "README.md", "operator/", "trainer/"]
