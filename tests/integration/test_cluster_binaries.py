"""The cluster binaries are built from the pinned modules, carry real version stamps (KWOK and Helm
read them) and come from the cache on a second build."""

import json
import os
import re
import subprocess

import pytest

pytestmark = pytest.mark.integration


def run(*cmd: str, env: dict | None = None) -> str:
    return subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, timeout=120).stdout


def test_server_and_kubectl_report_the_pinned_kubernetes_version(admin_kubectl, cluster_versions):
    versions = json.loads(admin_kubectl.run("version", "-o", "json").stdout)
    assert versions["serverVersion"]["gitVersion"] == cluster_versions["kubernetes"]
    assert versions["clientVersion"]["gitVersion"] == cluster_versions["kubernetes"]
    assert versions["serverVersion"]["minor"] == cluster_versions["kubernetes"].split(".")[1]


def test_helm_and_kwok_report_their_pinned_versions(admin_kubectl, cluster_versions):
    env = admin_kubectl.env
    assert run("helm", "version", "--template", "{{.Version}}", env=env) == cluster_versions["helm"]
    assert cluster_versions["kwok"].removeprefix("v") in run("kwok", "--version", env=env)
    assert cluster_versions["etcd"].removeprefix("v") in run("etcd", "--version", env=env)


def test_second_build_finds_everything_cached(repo_root):
    output = subprocess.run(
        [str(repo_root / "hack" / "cluster" / "build")],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
        env=os.environ,
    ).stderr
    # One line per component of the script's default list (its one home), each a cache hit.
    components = re.search(r"components=\(([a-z ]+)\)", (repo_root / "hack" / "cluster" / "build").read_text())
    lines = output.splitlines()
    assert [line.split("] ", 1)[1].split(" ")[0] for line in lines] == components.group(1).split(), output
    assert all(": cached in " in line for line in lines), output
