"""End to end on kind: the chart's operator (its image, built and loaded by hack/e2e-kind) runs the
quickstart LongContextJob as real CPU trainer pods until it Succeeds, and reports live progress; the
training is read from the trainer containers' own logs too, not only from the job's status."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml

from longctx_operator.localrun import parse_event
from support.cluster import Kubectl

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
TIMEOUT_SECONDS = 1200


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    return Kubectl(kubeconfig)(*args, input=input, timeout=120)


def trainer_events(kubeconfig: Path, namespace: str, pod: str) -> list[dict]:
    """The trainer's JSON progress lines in the pod's trainer container log."""
    log = kubectl(kubeconfig, "logs", "--namespace", namespace, pod, "-c", "trainer")
    return [event for line in log.splitlines() if (event := parse_event(line)) is not None]


def test_quickstart_succeeds_with_progress(kind_kubeconfig):
    namespace = f"quickstart-{uuid.uuid4().hex[:6]}"
    kubectl(kind_kubeconfig, "create", "namespace", namespace)
    try:
        manifest = yaml.safe_load(QUICKSTART.read_text())
        manifest["spec"]["data"] = {"kind": "synthetic"}  # the example's corpus is a path on this machine
        kubectl(kind_kubeconfig, "apply", "--namespace", namespace, "-f", "-", input=yaml.safe_dump(manifest))
        deadline = time.monotonic() + TIMEOUT_SECONDS
        seen_progress: dict = {}
        while True:
            job = json.loads(
                kubectl(kind_kubeconfig, "get", "longcontextjob", "quickstart", "--namespace", namespace, "-o", "json")
            )
            status = job.get("status") or {}
            seen_progress = status.get("progress") or seen_progress
            if status.get("phase") in ("Succeeded", "Failed") or time.monotonic() > deadline:
                break
            time.sleep(5)
        pods = kubectl(kind_kubeconfig, "get", "pods", "--namespace", namespace, "-o", "wide")
        assert status.get("phase") == "Succeeded", f"status: {json.dumps(status, indent=1)}\n{pods}"
        assert status["workers"]["succeeded"] == 2
        assert seen_progress.get("tokensPerSecond", 0) > 0 and seen_progress.get("step", 0) >= 1, seen_progress
        selector = "longctx.io/job-name=quickstart"
        listed = json.loads(kubectl(kind_kubeconfig, "get", "pods", "-n", namespace, "-l", selector, "-o", "json"))
        trainers = sorted(listed["items"], key=lambda pod: pod["metadata"]["name"])
        assert len({pod["spec"]["nodeName"] for pod in trainers}) == 2, pods  # two workers, one pod each
        steps = manifest["spec"]["steps"]
        for rank, pod in enumerate(trainers):  # every rank joined the same two-process job
            events = trainer_events(kind_kubeconfig, namespace, pod["metadata"]["name"])
            joined = events[0]
            assert joined["event"] == "joined" and joined["rank"] == rank and joined["processes"] == 2, events[:3]
        rank0 = trainer_events(kind_kubeconfig, namespace, trainers[0]["metadata"]["name"])  # only rank 0 reports
        assert [e["step"] for e in rank0 if e["event"] == "step"] == list(range(1, steps + 1)), rank0
        assert rank0[-1] == {"event": "done", "step": steps}, rank0[-3:]
    finally:
        kubectl(kind_kubeconfig, "delete", "namespace", namespace, "--wait=false")
