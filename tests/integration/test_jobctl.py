"""operator/jobctl.py against the real control plane: `kubectl longctx` (the installed plugin, found
by the real kubectl) and `longctx` subcommands on jobs that a real operator process runs.

KWOK plays the kubelet of this module's nodes; their InternalIP and kubelet port point the API
server's `pods/log` requests at tests/support/kubelet_logs.py, which serves each pod's lines as a
kubelet would (KWOK's pods have no containers, so the lines are the test's, not a trainer's).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import kubernetes
import pytest
import yaml

from support import kubelet_logs
from support import operator_harness as h
from support.exporters import stepping_exporter

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("suspend_leftovers")]
POOL = "jobctl-tests"
KEEP = {"longctx.io/keep-running": "true"}
PLUGIN = Path(sys.executable).parent / "kubectl-longctx"


@pytest.fixture(scope="module")
def logs_server(cluster, tmp_path_factory):
    config = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(str(cluster.kubeconfig), client_configuration=config)
    core = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(config))

    def finished(namespace: str, pod: str) -> bool:
        try:
            obj = core.read_namespaced_pod(pod, namespace)
        except kubernetes.client.exceptions.ApiException as e:
            return e.status == 404
        return obj.metadata.deletion_timestamp is not None or any(
            s.state.terminated for s in obj.status.container_statuses or []
        )

    server = kubelet_logs.KubeletLogs(tmp_path_factory.mktemp("kubelet"), finished)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def operator(cluster, admin_kubectl, logs_server, tmp_path_factory):
    """The operator, and four GPU nodes of this module's pool whose logs the test server serves."""
    nodes = h.add_pool_nodes(admin_kubectl, POOL, count=4, status=logs_server.node_status())
    with h.running_operator(admin_kubectl, tmp_path_factory.mktemp("operator"), nodes) as op:
        yield op


def job(name: str, **kwargs) -> dict:
    return h.job_manifest(name, pool=POOL, **kwargs)


def plugin(kubectl, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """`kubectl longctx ARGS -n <test namespace>`: the real kubectl finds the plugin on PATH."""
    env = kubectl.env | {"PATH": f"{PLUGIN.parent}{os.pathsep}{kubectl.env['PATH']}"}
    return subprocess.run(
        ["kubectl", "longctx", *args, "-n", kubectl.namespace],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def longctx(kubectl, *args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    """`longctx ARGS --kubeconfig <cluster> -n <test namespace>` (the same commands)."""
    return subprocess.run(
        [str(PLUGIN.parent / "longctx"), *args, "--kubeconfig", str(kubectl.kubeconfig), "-n", kubectl.namespace],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return proc.stdout


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr.strip()


def pod_names(kubectl, name: str, generation: int) -> dict[int, str]:
    pods = kubectl.pods(f"longctx.io/job-name={name},longctx.io/generation={generation}")
    return {
        int(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"]): p["metadata"]["name"] for p in pods
    }


def test_status_and_get_explain_the_layout_against_measured_tokens_per_second(operator, kubectl, wait_until):
    with stepping_exporter("explained") as metrics_url:
        kubectl.apply(
            job(
                "explained",
                steps=100_000,
                parallelism={"attention": "auto"},
                pod_annotations=KEEP,
                annotations={"longctx.io/metrics-url": metrics_url},
            )
        )
        obj = wait_until(
            lambda: (
                (o := kubectl.json("get", "lcj", "explained"))
                .get("status", {})
                .get("progress", {})
                .get("tokensPerSecond")
                and o
            ),
            timeout=90,
            what="measured tokens/s",
        )
        layout = obj["status"]["layout"]
        text = ok(plugin(kubectl, "status", "explained"))
        fields = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in text.splitlines())}
        assert fields["Phase"].startswith("Running")
        axes = f"data {layout['data']} x context {layout['context']} x tensor {layout['tensor']}"
        assert fields["Layout"].startswith(f"{axes} = 16 devices")
        assert fields["why"].startswith("fastest of ") and fields["why"].endswith("attention kinds (auto)")
        assert (
            fields["attention"].startswith(f"{layout['attention']}") and "chosen by the planner" in fields["attention"]
        )
        assert fields["memory/GPU"] == f"{layout['memoryPerGpu']} planned"
        estimated = f"{layout['estimatedTokensPerSecond']:,.0f}"
        assert fields["Tokens/s"].startswith(f"8,192 measured, {estimated} estimated by the planner")

        header, row = kubectl.run("get", "lcj", "explained").stdout.splitlines()
        assert header.split()[4:8] == ["DP", "CP", "TP", "ATTENTION"]
        assert row.split()[4:8] == [str(layout[a]) for a in ("data", "context", "tensor", "attention")]
        wide_header, wide_row = kubectl.run("get", "lcj", "explained", "-o", "wide").stdout.splitlines()
        assert "EST. TOKENS/S" in wide_header and "MEMORY/GPU" in wide_header
        assert layout["memoryPerGpu"] in wide_row.split()

        listed = ok(longctx(kubectl, "list"))
        assert listed.splitlines()[1].split()[:2] == ["explained", "Running"]
        assert f"{layout['data']}x{layout['context']}x{layout['tensor']}" in listed and "8,192" in listed


def test_suspend_resume_wait_and_delete(operator, kubectl, wait_until):
    kubectl.apply(job("cycle", pod_annotations=KEEP))
    assert ok(plugin(kubectl, "wait", "cycle", "--for", "Running", "--timeout", "90s")) == (
        "longcontextjob cycle is Running\n"
    )
    timed_out = one_line_error(plugin(kubectl, "wait", "cycle", "--for", "Succeeded", "--timeout", "2s"))
    assert timed_out == "longctx: timed out after 2s: cycle is Running (AllRanksRunning: 2 ranks Running)"

    assert "suspended" in ok(plugin(kubectl, "suspend", "cycle"))
    ok(plugin(kubectl, "wait", "cycle", "--for", "suspended", "--timeout", "60s"))
    assert kubectl.json("get", "lcj", "cycle")["spec"]["suspend"] is True
    wait_until(lambda: not pod_names(kubectl, "cycle", 1), timeout=30, what="generation 1's pods gone")
    assert ok(plugin(kubectl, "suspend", "cycle")) == "longcontextjob cycle is already suspended\n"

    assert "resumed" in ok(longctx(kubectl, "resume", "cycle"))
    ok(longctx(kubectl, "wait", "cycle", "--for", "Running", "--timeout", "90s"))
    assert kubectl.json("get", "lcj", "cycle")["status"]["workloadGeneration"] == 2

    assert ok(plugin(kubectl, "delete", "cycle", "--wait")).startswith("longcontextjob cycle deleted")
    assert kubectl.run("get", "lcj", "cycle", check=False).returncode != 0
    assert one_line_error(plugin(kubectl, "status", "cycle")) == (
        f"longctx: longcontextjob cycle not found in namespace {kubectl.namespace}"
    )
    assert one_line_error(plugin(kubectl, "logs", "cycle")) == (
        f"longctx: longcontextjob cycle not found in namespace {kubectl.namespace}"
    )


def test_wait_fails_at_once_when_the_job_ends_in_another_phase(operator, kubectl):
    kubectl.apply(job("doomed", pod_annotations={"longctx.io/fail": "true"}, restartPolicy={"maxRestarts": 0}))
    error = one_line_error(plugin(kubectl, "wait", "doomed", "--for", "Succeeded", "--timeout", "90s"))
    assert error.startswith("longctx: doomed is Failed (") and error.endswith("; it will never be Succeeded")
    assert one_line_error(plugin(kubectl, "resume", "doomed")) == (
        "longctx: doomed is Failed: a finished job cannot be resumed"
    )


def test_the_namespace_comes_from_the_kubeconfig_context(operator, kubectl, tmp_path):
    kubectl.apply(job("here", pod_annotations=KEEP))
    config = yaml.safe_load(kubectl.kubeconfig.read_text())
    for context in config["contexts"]:
        context["context"]["namespace"] = kubectl.namespace
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    proc = subprocess.run([str(PLUGIN), "list", "--kubeconfig", str(path)], capture_output=True, text=True, timeout=60)
    assert ok(proc).splitlines()[1].split()[0] == "here"


def test_logs_by_rank_and_of_every_rank(operator, kubectl, wait_until):
    kubectl.apply(job("talk", pod_annotations=KEEP))
    h.wait_phase(kubectl, wait_until, "talk", "Running")
    pods = pod_names(kubectl, "talk", 1)
    assert ok(plugin(kubectl, "logs", "talk")).splitlines() == kubelet_logs.lines(pods[0])
    assert ok(longctx(kubectl, "logs", "talk", "--rank", "1", "--tail", "1")).splitlines() == [f"{pods[1]} line 2"]
    every = ok(plugin(kubectl, "logs", "talk", "--all-ranks")).splitlines()
    assert every == [f"[rank {r}] {line}" for r in (0, 1) for line in kubelet_logs.lines(pods[r])]
    assert (
        one_line_error(plugin(kubectl, "logs", "talk", "--rank", "2")) == "longctx: --rank 2: talk has 2 ranks (0 to 1)"
    )
    assert one_line_error(plugin(kubectl, "logs", "talk", "--previous")) == "longctx: talk has no previous generation"


def _read_until(proc: subprocess.Popen, lines: list[str], wanted: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while wanted not in lines:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            pytest.fail(f"no {wanted!r} in the output of logs -f after {timeout}s: {lines}; {proc.stderr.read()}")
        time.sleep(0.2)


def test_logs_follow_the_job_across_a_gang_restart_until_it_ends(operator, kubectl, wait_until):
    kubectl.apply(job("phoenix", pod_annotations=KEEP))
    h.wait_phase(kubectl, wait_until, "phoenix", "Running")
    env = kubectl.env | {"PATH": f"{PLUGIN.parent}{os.pathsep}{kubectl.env['PATH']}"}
    follow = subprocess.Popen(
        ["kubectl", "longctx", "logs", "phoenix", "-f", "--all-ranks", "-n", kubectl.namespace],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.extend(line.rstrip("\n") for line in follow.stdout))
    reader.start()
    try:
        first = pod_names(kubectl, "phoenix", 1)
        _read_until(follow, out, f"[rank 1] {first[1]} line 2", timeout=60)
        # Rank 1 fails: the operator deletes the gang and starts generation 2 (new pod names).
        kubectl.run("annotate", "pod", first[1], "longctx.io/fail=true")
        wait_until(
            lambda: (
                kubectl.json("get", "lcj", "phoenix")["status"].get("workloadGeneration") == 2
                and len(pod_names(kubectl, "phoenix", 2)) == 2
            ),
            timeout=90,
            what="generation 2's pods",
        )
        second = pod_names(kubectl, "phoenix", 2)
        for rank in (0, 1):
            _read_until(follow, out, f"[rank {rank}] {second[rank]} line 2", timeout=60)
        assert f"[rank 1] {first[1]} exited" in out  # its stream ended with its container
        # Generation 2 completes: the streams end with the containers and logs -f with the job.
        for pod in second.values():
            kubectl.run("annotate", "pod", pod, "longctx.io/keep-running-", "longctx.io/complete-after=1s")
        assert follow.wait(timeout=90) == 0
        reader.join(timeout=10)
        stderr = follow.stderr.read()
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
    assert "longctx: phoenix: generation 2 started (gang restart or resume); following its pods" in stderr, stderr
    assert stderr.strip().endswith("longctx: phoenix is Succeeded"), stderr
    for rank in (0, 1):
        mine = [line for line in out if line.startswith(f"[rank {rank}] {second[rank]}")]
        assert mine == [f"[rank {rank}] {line}" for line in kubelet_logs.lines(second[rank])] + [
            f"[rank {rank}] {second[rank]} exited"
        ]
    assert json.dumps(out).count(f"{first[0]} line 0") == 1  # each pod's stream read once
    assert one_line_error(plugin(kubectl, "logs", "phoenix", "--previous")) == (
        "longctx: phoenix has no pods of generation 1 "
        "(the operator deletes a generation's pods when it restarts or ends the gang)"
    )
