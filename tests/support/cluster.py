"""kubectl against a test cluster, for the integration and e2e tests and the benchmarks (which put
tests/ on their path): the cached cluster binaries (hack/cluster/build) first on PATH, the
cluster's kubeconfig, optionally one namespace."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from support.cache import cache_root
from support.waiting import poll_until

REPO = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPTS = REPO / "hack" / "cluster"


def component_versions() -> dict[str, str]:
    """The component versions pinned in hack/cluster/versions.env, e.g. {"kubernetes": "v1.36.3"}."""
    versions = {}
    for line in (CLUSTER_SCRIPTS / "versions.env").read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            versions[key.removesuffix("_VERSION").lower()] = value.strip()
    return versions


def cluster_bin_path() -> str:
    """PATH entries holding the cached cluster binaries (kubectl, helm, kwok, etcd...)."""
    cache = cache_root()
    return os.pathsep.join(str(cache / f"{name}-{version}" / "bin") for name, version in component_versions().items())


class KubectlError(AssertionError):
    """A kubectl command exited non-zero: the message holds the command, its status and output."""


@dataclass(frozen=True)
class Kubectl:
    """Runs the cached kubectl against one cluster, optionally bound to one namespace."""

    kubeconfig: Path
    namespace: str | None = None

    @property
    def env(self) -> dict[str, str]:
        return os.environ | {
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": cluster_bin_path() + os.pathsep + os.environ["PATH"],
        }

    def run(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float | None = 60
    ) -> subprocess.CompletedProcess:
        cmd = ["kubectl", *(["--namespace", self.namespace] if self.namespace else []), *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, env=self.env, timeout=timeout)
        if check and proc.returncode != 0:
            raise KubectlError(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    def __call__(self, *args: str, input: str | None = None, timeout: float | None = 60) -> str:
        """The output of a command that must succeed."""
        return self.run(*args, input=input, timeout=timeout).stdout

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)

    def wait_established(self, crd: str, timeout: float = 60) -> None:
        """Waits until the CRD named `crd` is Established. Not `kubectl wait`: right after a create the
        CRD has no status.conditions yet, and kubectl 1.36 then fails at once ("accessor error")."""

        def established() -> bool:
            conditions = (self.json("get", "crd", crd).get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

        poll_until(established, timeout, interval=0.2, what=f"CRD {crd} Established")

    def create_namespace(self, name: str, timeout: float = 60) -> None:
        """Creates namespace `name` and waits for its default service account, which the
        service-account controller adds a moment later and pods need."""
        self.run("create", "namespace", name)
        poll_until(
            lambda: self.run("-n", name, "get", "serviceaccount", "default", check=False).returncode == 0,
            timeout,
            what=f"the default service account in {name}",
        )

    def apply(self, *manifests: dict) -> subprocess.CompletedProcess:
        """Applies manifests given as dicts (server-side checks apply: schema, admission)."""
        docs = "\n---\n".join(yaml.safe_dump(m) for m in manifests)
        return self.run("apply", "-f", "-", input=docs)

    def pods(self, selector: str) -> list[dict]:
        return self.json("get", "pods", "-l", selector)["items"]
