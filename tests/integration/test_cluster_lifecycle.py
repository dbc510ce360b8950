"""hack/cluster/up and down on their own (the session fixture may have reused a running cluster):
a second, private cluster starts warm within 30 s, and down leaves no process or state behind."""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def test_up_starts_a_ready_cluster_and_down_removes_it(repo_root, tmp_path, admin_kubectl):
    state = tmp_path / "cluster"
    env = os.environ | {"LONGCTX_CLUSTER_DIR": str(state)}
    scripts = repo_root / "hack" / "cluster"
    pids: list[int] = []
    try:
        printed = subprocess.run(
            [str(scripts / "up"), "--nodes", "1"], env=env, check=True, capture_output=True, text=True, timeout=120
        ).stdout.strip()
        assert printed == str(state / "kubeconfig")
        pids = [int(p.read_text()) for p in (state / "pids").glob("*.pid")]
        assert len(pids) == 5 and all(map(alive, pids))
        ready = subprocess.run(  # admin_kubectl.env has the binaries on PATH; --kubeconfig picks the cluster
            [
                "kubectl",
                "--kubeconfig",
                printed,
                "get",
                "nodes",
                "-o",
                "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}",
            ],
            env=admin_kubectl.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert ready == "True"
    finally:
        subprocess.run([str(scripts / "down")], env=env, check=True, capture_output=True, timeout=60)
    assert not state.exists()
    assert not any(map(alive, pids))
