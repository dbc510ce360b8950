"""hack/images/push's argument handling: every mistake in REGISTRY or the options ends with one
line and exit 2 before anything is built. Building and pushing for real (to an OCI layout and a
registry on loopback) is tests/e2e/test_images.py."""

import os
import subprocess

import pytest

from support.manifests import ROOT

PUSH = ROOT / "hack" / "images" / "push"


def push(*args: str, cache) -> subprocess.CompletedProcess:
    env = os.environ | {"LONGCTX_IMAGES_CACHE": str(cache)}
    return subprocess.run([str(PUSH), *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    "args, needle",
    [
        ((), "usage: hack/images/push"),
        (("Registry.example.com/Team",), "not a registry and path"),
        (("registry.example.com/team:v1",), "not a registry and path"),
        (("registry.example.com/team@sha256:abc",), "not a registry and path"),
        (("https://registry.example.com",), "not a registry and path"),
        (("one.example.com", "two.example.com"), "one REGISTRY, got one.example.com and two.example.com"),
        (("--tls-verify=no", "localhost:5000"), "unknown option --tls-verify=no"),
        (("oci:",), "oci:DIR needs a directory"),
    ],
)
def test_a_bad_registry_or_option_is_refused_before_building(tmp_path, args, needle):
    cache = tmp_path / "images"
    result = push(*args, cache=cache)
    assert result.returncode == 2
    assert needle in result.stderr.splitlines()[0]
    assert not cache.exists()  # hack/images/build (its storage lives there) never ran


def test_help_names_the_destinations_and_the_helm_line(tmp_path):
    result = push("--help", cache=tmp_path / "images")
    assert result.returncode == 0
    for needle in ("REGISTRY/longctx-operator:<appVersion>-<hash12>", "oci:DIR", "--tls-verify=false", "helm install"):
        assert needle in result.stdout
