"""The clusters of the e2e tests: the local cluster with real nodes (hack/cluster/real-nodes,
docs/cluster.md), and kind (hack/e2e-kind, docs/e2e.md).

`real_cluster` (module: it stops when the real-node tests end, not when the session does, so
its kubelets, containerds and control plane do not slow the tiers after it): see its docstring;
it runs wherever containers can (root, containerd, runc, cgroups), which includes this project's
CI machines.

`kind_kubeconfig` (module, like `real_cluster`): $LONGCTX_E2E_KUBECONFIG when `hack/e2e-kind test`
already brought the cluster up; otherwise `hack/e2e-kind up` here (deleted again when the kind tests
end unless LONGCTX_E2E_KEEP=1). `hack/test` runs it offline (LONGCTX_E2E_OFFLINE=1: podman, and kind
and its node image built here).
Where kind or a container engine with a reachable daemon is missing, the tests are skipped with
the reason `hack/e2e-kind check` gives, for what cannot run here (the suite's other skip is
tests/e2e/test_images.py's, where buildah cannot run).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from support.cluster import Kubectl, cluster_bin_path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "e2e-kind"


@pytest.fixture(scope="module")
def kind_kubeconfig() -> Iterator[Path]:
    if os.environ.get("LONGCTX_E2E_KUBECONFIG"):
        yield Path(os.environ["LONGCTX_E2E_KUBECONFIG"])
        return
    check = subprocess.run([str(SCRIPT), "check"], capture_output=True, text=True)
    if check.returncode == 3:
        pytest.skip(f"kind e2e cannot run here: {check.stderr.strip()}")
    assert check.returncode == 0, check.stderr
    up = subprocess.run([str(SCRIPT), "up"], stdout=subprocess.PIPE, text=True)
    try:
        assert up.returncode == 0, "hack/e2e-kind up failed (its output is above)"
        yield Path(up.stdout.strip().splitlines()[-1])
    finally:
        if os.environ.get("LONGCTX_E2E_KEEP") != "1":
            subprocess.run([str(SCRIPT), "down"], check=False)


CLUSTER = REPO / "hack" / "cluster"


@dataclass(frozen=True)
class RealCluster:
    """The local cluster with real nodes (hack/cluster/up --real-nodes) and the chart's operator
    running in it as a pod from the image built here (hack/cluster/install-operator)."""

    state: Path
    kubeconfig: Path

    @property
    def path(self) -> str:
        """The cached cluster binaries' folders (kubectl, helm), for PATH."""
        return cluster_bin_path()

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120) -> str:
        return Kubectl(self.kubeconfig).run(*args, input=input, check=check, timeout=timeout).stdout


REAL_NODES = 2
"""Real nodes of a module's cluster: a two-rank gang's; a module that needs a spare node sets its
own `REAL_NODES` (tests/e2e/test_real_nodes_health.py: a node dies under the gang)."""

KUEUE = False
"""Whether a module's cluster runs Kueue's manager (hack/cluster/kueue, started before the chart)
and the chart's operator reads Kueue's Workloads; a module sets its own `KUEUE`
(tests/e2e/test_real_nodes.py: a real Kueue preemption)."""


@pytest.fixture(scope="module")
def real_cluster(request, tmp_path_factory) -> Iterator[RealCluster]:
    """Builds the images (a cache hit after tests/e2e/test_images.py), starts a cluster with the
    module's `REAL_NODES` real nodes and no simulated ones, loads the images into the nodes'
    containerd and installs the chart; skipped, with the reason, only where containers cannot run."""
    count = str(getattr(request.module, "REAL_NODES", REAL_NODES))
    kueue = getattr(request.module, "KUEUE", KUEUE)
    check = subprocess.run([str(CLUSTER / "real-nodes"), "check"], capture_output=True, text=True)
    if check.returncode == 3:
        pytest.skip(check.stderr.strip())
    assert check.returncode == 0, check.stderr
    state = tmp_path_factory.mktemp("real-cluster")
    env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state / "cluster")}
    try:
        up = subprocess.run(
            [str(CLUSTER / "up"), "--nodes", "0", "--real-nodes", count], env=env, stdout=subprocess.DEVNULL
        )
        assert up.returncode == 0, f"hack/cluster/up --real-nodes {count} failed; its output is above"
        if kueue:
            started = subprocess.run([str(CLUSTER / "kueue")], env=env, stdout=subprocess.DEVNULL)
            assert started.returncode == 0, "hack/cluster/kueue failed; its output is above"
        helm_args = ["--set", "operator.readKueueWorkloads=true"] if kueue else []
        install = subprocess.run([str(CLUSTER / "install-operator"), *helm_args], env=env, stdout=subprocess.DEVNULL)
        assert install.returncode == 0, "hack/cluster/install-operator failed; its output is above"
        yield RealCluster(state / "cluster", state / "cluster" / "kubeconfig")
    finally:
        subprocess.run([str(CLUSTER / "down")], env=env, check=False)
    assert not _leftovers(state / "cluster"), _leftovers(state / "cluster")


def _leftovers(state: Path) -> list[str]:
    """What `hack/cluster/down` must not leave behind: processes, mounts or pod bridges of the cluster."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if str(state) in cmdline:
                found.append(f"process {proc.name}: {cmdline[:200]}")
    found += [
        f"mount {line.split()[4]}"
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if str(state) in line
    ]
    found += [f"bridge {link.name}" for link in Path("/sys/class/net").iterdir() if link.name.startswith("lcx")]
    return found
