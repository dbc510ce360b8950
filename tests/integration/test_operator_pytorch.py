"""examples/pytorch-quickstart.yaml through the operator on the local control plane: KWOK plays
the kubelet for its four pods while the real PyTorch example trainer runs beside them as `longctx
run` processes; the operator reads rank 0's exporter (the job's longctx.io/metrics-url
annotation, as in test_operator.py) into status.progress, and the job reaches Succeeded with the
trainer's tokens/s in its status."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import pytest
import yaml

from support import operator_harness as h
from support.manifests import ROOT, load_example
from support.ports import consecutive_free_ports

pytestmark = pytest.mark.integration
POOL = "pytorch-tests"


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, tmp_path_factory):
    """The operator, and four nodes of this module's own pool."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=4)
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes) as op:
        yield op


def test_pytorch_quickstart_succeeds_with_the_trainers_throughput(operator, kubectl, wait_until, tmp_path):
    port = consecutive_free_ports(4)  # its four workers listen on port .. port+3
    manifest = load_example(ROOT / "examples" / "pytorch-quickstart.yaml")
    spec = manifest["spec"]
    spec["data"]["path"] = str((ROOT / "examples" / spec["data"]["path"]).resolve())
    spec.update({"steps": 400, "sequenceLength": 512, "globalBatchTokens": 1024, "metrics": {"port": port}})
    local_job = tmp_path / "job.yaml"
    local_job.write_text(yaml.safe_dump(manifest))
    log = tmp_path / "trainer.log"
    with log.open("w") as stderr:
        trainer = subprocess.Popen(
            [sys.executable, "-m", "longctx_operator.cli", "run", str(local_job), "--run-dir", str(tmp_path / "run")],
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        # Four torch processes start beside the unit tier's XLA compiles in CI: a generous budget.
        h.wait_ready(f"http://127.0.0.1:{port}/metrics", timeout=300, server=trainer)
        # The same job in the cluster: its pods on this module's (simulated GPU) nodes, done after 40 s.
        spec["scheduling"] = {
            "nodeSelector": {h.POOL_LABEL: POOL},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        }
        manifest["metadata"]["annotations"] = {
            "longctx.io/metrics-url": f"http://127.0.0.1:{port}/metrics",
            "longctx.io/pod-annotations": json.dumps({"longctx.io/complete-after": "40s"}),
        }
        kubectl.apply(manifest)
        running = wait_until(
            lambda: ((kubectl.json("get", "lcj", "pytorch-quickstart").get("status") or {}).get("progress") or {}).get(
                "step"
            ),
            timeout=90,
            what="status.progress from the PyTorch trainer",
        )
        done = h.wait_phase(kubectl, wait_until, "pytorch-quickstart", "Succeeded", timeout=120)
    finally:
        trainer.send_signal(signal.SIGINT)
        trainer.wait(timeout=120)
        print(log.read_text()[-4000:])  # pytest shows it when the test fails
    progress = done["status"]["progress"]
    assert progress["step"] >= running > 0 and progress["tokensPerSecond"] > 0, progress
    assert done["status"]["workers"]["succeeded"] == 4
    container = kubectl.json("get", "job", "pytorch-quickstart-g1")["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "-m", "longctx_trainer.pytorch"]
    env = {var["name"]: var.get("value") for var in container["env"]}
    assert (env["WORLD_SIZE"], env["LONGCTX_DATA_PARALLEL"], env["LONGCTX_CONTEXT_PARALLEL"]) == ("4", "2", "2")
