"""The images, built here offline (hack/images/build, docs/images.md) and run as containers.

`hack/images/build --json` builds the debootstrapped base, the operator image and the trainer image
in its CPU variant (cached under ~/.cache/longctx/images: a warm run is a cache hit); the images are
then run with podman (hack/images/run) the way the operator's chart and the rendered trainer pods
run them, and `hack/images/push` sends both to an OCI layout and to a registry on loopback (Debian's
docker-registry, which hack/images/deps installs). The one skip: buildah cannot run on this machine
(the reason is in the skip message)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(3600)]

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "images" / "build"
RUN = REPO / "hack" / "images" / "run"
PUSH = REPO / "hack" / "images" / "push"
APP_VERSION = yaml.safe_load((REPO / "charts" / "longctx" / "Chart.yaml").read_text())["appVersion"]
VALUES = yaml.safe_load((REPO / "charts" / "longctx" / "values.yaml").read_text())
# The trainer pod's container, as the operator renders it (operator/render/workload.py and
# docs/security.md): uid/gid 1000, every capability dropped, no privilege escalation.
POD_LIKE = ["--user", "1000:1000", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]


def buildah_problem() -> str | None:
    """Why buildah cannot run here, or None: a throwaway storage must take a scratch container."""
    if shutil.which("buildah") is None:
        return "buildah is not installed (hack/images/deps installs it; hack/test runs that)"
    with tempfile.TemporaryDirectory() as tmp:
        probe = subprocess.run(
            ["buildah", "--root", f"{tmp}/root", "--runroot", f"{tmp}/run", "--storage-driver", "vfs"]
            + ["from", "--pull=never", "scratch"],
            capture_output=True,
            text=True,
        )
        subprocess.run(
            ["buildah", "--root", f"{tmp}/root", "--runroot", f"{tmp}/run", "--storage-driver", "vfs", "rm", "--all"],
            capture_output=True,
        )
    if probe.returncode != 0:
        return f"buildah cannot create a container here: {probe.stderr.strip()}"
    return None


def build() -> dict[str, dict]:
    result = subprocess.run([str(BUILD), "--json"], stdout=subprocess.PIPE, text=True)
    assert result.returncode == 0, "hack/images/build failed (its output is above)"
    records = [json.loads(line) for line in result.stdout.splitlines()]
    return {r["image"]: r for r in records}


@pytest.fixture(scope="module")
def built() -> dict[str, dict]:
    if problem := buildah_problem():
        pytest.skip(problem)
    return build()


def run(image: str, *args: str, entrypoint: str | None = None, options: list[str] = ()) -> str:
    command = [str(RUN), *options]
    if entrypoint is not None:
        command += ["--entrypoint", entrypoint]
    result = subprocess.run([*command, image, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, f"{' '.join(command)} {image} {' '.join(args)}: {result.stdout}{result.stderr}"
    return result.stdout


def test_builds_archives_tagged_by_input_hash(built):
    assert set(built) == {"base", "operator", "trainer-cpu"}
    operator, trainer = built["operator"], built["trainer-cpu"]
    assert re.fullmatch(
        rf"{re.escape(VALUES['image']['repository'])}:{re.escape(APP_VERSION)}-[0-9a-f]{{12}}", operator["ref"]
    )
    trainer_repository = VALUES["defaults"]["trainerImage"]["repository"]
    assert re.fullmatch(rf"{re.escape(trainer_repository)}:{re.escape(APP_VERSION)}-cpu-[0-9a-f]{{12}}", trainer["ref"])
    for name, record in built.items():
        archive = Path(record["archive"])
        assert archive.name == f"{name}-{record['ref'][-12:]}.tar"
        assert record["id"] and archive.is_file()
        with tarfile.open(archive) as tar:  # a docker-archive: manifest.json names the tag and config
            manifest = json.load(tar.extractfile("manifest.json"))
        assert manifest[0]["RepoTags"] == [record["ref"]]
        assert manifest[0]["Config"] == f"{record['id']}.json"


def test_trainer_image_runs_the_trainer_on_cpu_as_uid_1000(built):
    image = built["trainer-cpu"]["ref"]
    assert run(image, "-c", "import os; print(os.getuid(), os.getgid())", entrypoint="python").split() == [
        "1000",
        "1000",
    ]
    help_text = run(image, "--help", options=POD_LIKE)  # the entrypoint: python -m longctx_trainer
    assert "--config" in help_text
    launch = run(image, "-m", "longctx_trainer.launch", "--help", entrypoint="python", options=POD_LIKE)
    assert "--config" in launch  # the command the operator renders (BUNDLED_TRAINER_COMMAND)
    devices = run(image, "-c", "import jax; print(jax.devices())", entrypoint="python", options=POD_LIKE)
    assert "CpuDevice" in devices, devices
    home = run(
        image, "-c", 'set -e; touch "$HOME/w" /tmp/w /checkpoints/w; echo "$HOME"', entrypoint="sh", options=POD_LIKE
    )
    assert home.strip() == "/home/longctx"


def test_operator_image_runs_longctx_without_jax_non_root_read_only(built):
    image = built["operator"]["ref"]
    read_only = ["--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    uid = run(image, "-u", entrypoint="id", options=read_only)
    assert uid.strip() not in ("", "0")
    assert "--all-namespaces" in run(image, "--help", options=read_only)  # ENTRYPOINT longctx operator
    assert "validate" in run(image, "--help", entrypoint="longctx", options=read_only)
    no_jax = run(
        image, "-c", "import importlib.util as u; print(u.find_spec('jax'))", entrypoint="python", options=read_only
    )
    assert no_jax.strip() == "None"


def test_operator_starts_with_a_read_only_root(built, tmp_path):
    """`longctx operator` gets as far as talking to the API server (none here) on a read-only root
    with /tmp a tmpfs, as the chart runs it: nothing at startup writes to HOME or the image."""
    image = built["operator"]["ref"]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    kubeconfig.chmod(0o644)
    command = [  # as the chart runs it; timeout(1) ends it in the container once it has run a while
        str(RUN),
        "--read-only",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--volume",
        f"{kubeconfig}:/etc/longctx/kubeconfig:ro",
        "--env",
        "KUBECONFIG=/etc/longctx/kubeconfig",
        "--entrypoint",
        "timeout",
        image,
        "8",
        "longctx",
        "operator",
        "--all-namespaces",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert "Read-only file system" not in output and "Permission denied" not in output, output
    assert result.returncode == 124, output  # still running (retrying the API server) when stopped
    assert "Initial authentication has finished" in output and "GET https://127.0.0.1:9/api" in output, output


def test_second_build_is_a_cache_hit(built):
    again = build()
    for name, record in again.items():
        assert record["cached"] is True, record
        assert (record["ref"], record["id"], record["archive"]) == (
            built[name]["ref"],
            built[name]["id"],
            built[name]["archive"],
        )


def test_storage_keeps_no_dangling_layer_images(built):
    """Each rebuild prunes the layer images no tag needs (hack/images/build, finish): left behind,
    they filled this machine's disk at about 1.5 GB per trainer rebuild."""
    storage_conf = Path(built["base"]["archive"]).parent / "storage.conf"
    listed = subprocess.run(
        ["buildah", "images", "--all", "--filter", "dangling=true", "--format", "{{.ID}}"],
        env={**os.environ, "CONTAINERS_STORAGE_CONF": str(storage_conf)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert listed.stdout.split() == []


def _tag(record: dict) -> str:
    return record["ref"].rsplit(":", 1)[1]


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry (distribution 2.8) on a free loopback port, storing under tmp_path."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = tmp_path / "registry.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "version": 0.1,
                "log": {"level": "warn"},
                "storage": {"filesystem": {"rootdirectory": str(tmp_path / "blobs")}},
                "http": {"addr": f"127.0.0.1:{port}"},
            }
        )
    )
    log = (tmp_path / "registry.log").open("w")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=log, stderr=log)
    try:
        for _ in range(100):  # up when /v2/ answers
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=1)
                break
            except OSError:
                assert server.poll() is None, (tmp_path / "registry.log").read_text()
                time.sleep(0.1)
        yield f"127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait(timeout=30)


def _manifest(registry: str, name: str, tag: str) -> dict:
    request = urllib.request.Request(
        f"http://{registry}/v2/{name}/manifests/{tag}",
        headers={
            "Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
        },
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response)


def test_push_sends_both_images_to_a_registry_and_prints_the_helm_line(built, registry):
    result = subprocess.run(
        [str(PUSH), "--tls-verify=false", f"{registry}/team"], stdout=subprocess.PIPE, text=True, timeout=1800
    )
    assert result.returncode == 0, "hack/images/push failed (its output is above)"
    [line] = result.stdout.splitlines()
    words = shlex.split(line)
    assert words[:3] == ["helm", "install", "longctx"]
    sets = dict(words[i + 1].split("=", 1) for i, word in enumerate(words) if word == "--set")
    operator, trainer = built["operator"], built["trainer-cpu"]
    assert sets == {
        "image.repository": f"{registry}/team/longctx-operator",
        "image.tag": _tag(operator),
        "defaults.trainerImage.repository": f"{registry}/team/longctx-trainer",
        "defaults.trainerImage.tag": _tag(trainer),
    }
    for key in sets:  # the chart has each value it sets
        node = VALUES
        for part in key.split("."):
            node = node[part]
    for name, record in (("longctx-operator", operator), ("longctx-trainer", trainer)):
        manifest = _manifest(registry, f"team/{name}", _tag(record))
        assert manifest["config"]["digest"] == f"sha256:{record['id']}"  # the image built, as built


def test_push_to_an_oci_layout_holds_both_images_by_name(built, tmp_path):
    layout = tmp_path / "layout"
    result = subprocess.run([str(PUSH), f"oci:{layout}"], stdout=subprocess.PIPE, text=True, timeout=1800)
    assert result.returncode == 0 and result.stdout == ""
    index = json.loads((layout / "index.json").read_text())
    names = {m["annotations"]["org.opencontainers.image.ref.name"] for m in index["manifests"]}
    expected = {record["ref"].rsplit("/", 1)[1] for name, record in built.items() if name != "base"}
    assert names == expected
