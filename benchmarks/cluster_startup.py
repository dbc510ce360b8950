"""Start-up costs of the local control plane (hack/cluster): cold build, warm start, time for N
simulated GPU nodes to become Ready, and the control plane's memory before and after. With
--real-nodes, also: the image builds, a cluster with two real nodes Ready, the images loaded into
them, the chart's operator running, and the time from `kubectl apply` of the quickstart to its
first training step logged by a real trainer pod.

    python benchmarks/cluster_startup.py [--nodes 1000] [--cold-build] [--real-nodes]

Without --cold-build the cold build time is the one the cache recorded when it was built
(build-seconds per component); with it, everything is rebuilt into empty temporary build and
binary caches (the Go module download cache is kept, so network time is not counted).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # support.cluster: the tests' kubectl
from support.cache import cache_root
from support.cluster import Kubectl

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "hack" / "cluster"
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")


def versions() -> dict[str, str]:
    """The version of each component hack/cluster/build builds by default (its list is the one home;
    JobSet, a benchmark's baseline, is built only on request); `node` (kubelet, kube-proxy) has the
    control plane's."""
    pairs = (
        line.split("=", 1)
        for line in (SCRIPTS / "versions.env").read_text().splitlines()
        if "=" in line and not line.startswith("#")
    )
    found = {key.removesuffix("_VERSION").lower(): value.strip() for key, value in pairs}
    found["node"] = found["kubernetes"]
    default = re.search(r"components=\(([a-z ]+)\)", (SCRIPTS / "build").read_text()).group(1).split()
    return {name: found[name] for name in default}


def recorded_build_seconds(cache: Path) -> dict[str, int]:
    return {
        name: int((cache / f"{name}-{version}" / "build-seconds").read_text()) for name, version in versions().items()
    }


def cold_build_seconds() -> dict[str, int]:
    with tempfile.TemporaryDirectory(prefix="longctx-cold-build-") as scratch:
        env = os.environ | {"LONGCTX_CACHE": f"{scratch}/longctx", "GOCACHE": f"{scratch}/go-build"}
        subprocess.run([str(SCRIPTS / "build")], env=env, check=True)
        return recorded_build_seconds(Path(scratch) / "longctx")


def rss_mib(state: Path) -> dict[str, float]:
    """Resident memory of each control-plane process, from the pids hack/cluster/up recorded."""
    usage = {}
    for name in COMPONENTS:
        pid = (state / "pids" / f"{name}.pid").read_text().strip()
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                usage[name] = int(line.split()[1]) / 1024
    return usage


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.monotonic()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - start


def built_seconds(record: dict) -> float:
    """How long an image took to build: now, or (a cache hit) when its archive was made, as the
    record kept beside the archive says."""
    if not record["cached"]:
        return record["build_seconds"]
    return json.loads(Path(record["archive"]).with_suffix(".json").read_text())["build_seconds"]


def first_step_on_real_nodes() -> list[tuple[str, str]]:
    """Two real nodes, then the images built (or cached), loaded and the chart installed
    (hack/cluster/install-operator), then the quickstart applied and timed until rank 0's container
    logs its first step."""
    path = subprocess.run([str(SCRIPTS / "path")], check=True, capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="longctx-bench-real-") as state_dir:
        env = os.environ | {"LONGCTX_CLUSTER_DIR": state_dir, "PATH": f"{path}:{os.environ['PATH']}"}
        kubectl = Kubectl(Path(state_dir) / "kubeconfig")

        try:
            up = [str(SCRIPTS / "up"), "--nodes", "0", "--real-nodes", "2"]
            rows = [("start with 2 real nodes Ready", f"{timed(up, env):.1f} s")]
            install = subprocess.run([str(SCRIPTS / "install-operator")], env=env, check=True, stdout=subprocess.PIPE)
            installed = json.loads(install.stdout)
            rows += [
                (f"image build: {name}" + (" (recorded in cache)" if r["cached"] else ""), f"{built_seconds(r)} s")
                for name, r in installed["images"].items()
            ]
            rows.append(("images loaded into both nodes", f"{installed['seconds']['load']:.1f} s"))
            rows.append(("helm install (operator pod Ready)", f"{installed['seconds']['helm']:.1f} s"))
            manifest = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
            manifest["spec"]["data"] = {"kind": "synthetic"}
            manifest["spec"]["checkpoint"] = {"path": "/tmp/checkpoints", "intervalSteps": 1000}
            start = time.monotonic()
            kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))
            name = manifest["metadata"]["name"]
            logs = ("logs", "-l", f"longctx.io/job-name={name}", "-c", "trainer")
            while '"event": "step"' not in kubectl.run(*logs, check=False).stdout:
                if time.monotonic() - start > 900:
                    raise SystemExit("no training step within 15 minutes of kubectl apply")
                time.sleep(1)
            rows.append(("kubectl apply to first training step (real pods)", f"{time.monotonic() - start:.1f} s"))
        finally:
            subprocess.run([str(SCRIPTS / "down")], env=env, check=False)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="simulated nodes to add to the default 4")
    parser.add_argument("--cold-build", action="store_true", help="rebuild everything into empty caches")
    parser.add_argument("--real-nodes", action="store_true", help="also time images, real nodes, first step")
    args = parser.parse_args()

    subprocess.run([str(SCRIPTS / "build")], check=True)  # the warm start below must not include a build
    build = cold_build_seconds() if args.cold_build else recorded_build_seconds(cache_root())

    with tempfile.TemporaryDirectory(prefix="longctx-bench-cluster-") as state_dir:
        state = Path(state_dir)
        env = os.environ | {"LONGCTX_CLUSTER_DIR": state_dir}
        try:
            warm_start = timed([str(SCRIPTS / "up"), "--nodes", "4"], env)
            idle_rss = rss_mib(state)
            nodes_ready = timed([str(SCRIPTS / "add-nodes"), str(state / "kubeconfig"), str(args.nodes), "4"], env)
            time.sleep(5)  # let the controllers settle on the new nodes before reading memory
            loaded_rss = rss_mib(state)
        finally:
            subprocess.run([str(SCRIPTS / "down")], env=env, check=False)

    rows = [(f"cold build: {name}", f"{seconds} s") for name, seconds in build.items()]
    rows.append(
        (
            "cold build: total" + (" (rebuilt now)" if args.cold_build else " (recorded in cache)"),
            f"{sum(build.values())} s",
        )
    )
    rows.append(("warm start (control plane + 4 nodes Ready)", f"{warm_start:.1f} s"))
    rows.append((f"{args.nodes} more simulated nodes Ready", f"{nodes_ready:.1f} s"))
    for name in COMPONENTS:
        rows.append((f"RSS {name} (idle / {args.nodes} nodes)", f"{idle_rss[name]:.0f} / {loaded_rss[name]:.0f} MiB"))
    rows.append(
        (
            f"RSS control plane total (idle / {args.nodes} nodes)",
            f"{sum(idle_rss.values()):.0f} / {sum(loaded_rss.values()):.0f} MiB",
        )
    )
    if args.real_nodes:
        rows += first_step_on_real_nodes()
    width = max(len(label) for label, _ in rows)
    print(f"{'measure'.ljust(width)}  value")
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")


if __name__ == "__main__":
    main()
