"""operator/jobview.py: what `longctx status`, `list`, `wait` and `logs` decide from the objects they
read (the commands themselves run against the control plane in tests/integration/test_jobctl.py)."""

from datetime import UTC, datetime

import pytest

from longctx_operator import jobview

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def job(phase="Running", **status) -> dict:
    return {
        "metadata": {"name": "llama", "namespace": "team", "creationTimestamp": "2026-11-26T10:00:00Z"},
        "spec": {"steps": 2000, "parallelism": {"attention": "auto"}, "restartPolicy": {"maxRestarts": 3}},
        "status": {"phase": phase, **status},
    }


LAYOUT = {
    "data": 2,
    "context": 4,
    "tensor": 1,
    "processes": 8,
    "processesPerNode": 8,
    "offload": False,
    "attention": "ulysses",
    "memoryPerGpu": "61.2Gi",
    "estimatedTokensPerSecond": 50000.0,
    "explanation": "fastest of 12 fitting layouts and attention kinds (auto)",
}
PROGRESS = {"step": 412, "tokensPerSecond": 45000.0, "percentComplete": 20.6, "eta": "7h55m", "mfu": 0.41}


def test_status_explains_the_layout_and_compares_estimated_with_measured_tokens_per_second():
    text = jobview.format_status(job(layout=LAYOUT, progress=PROGRESS, workloadGeneration=2, restarts=1))
    lines = dict(line.split(":", 1) for line in text.splitlines())
    assert lines["Layout"].strip() == "data 2 x context 4 x tensor 1 = 8 devices, 8 processes"
    assert lines["  why"].strip() == LAYOUT["explanation"]
    assert lines["  attention"].strip() == "ulysses, chosen by the planner (parallelism.attention: auto)"
    assert lines["  memory/GPU"].strip() == "61.2Gi planned"
    assert lines["Tokens/s"].strip() == ("45,000 measured, 50,000 estimated by the planner, measured/estimated 0.90")
    assert lines["Progress"].strip() == "step 412 of 2000 (20.6%), MFU 41.0%"
    assert lines["ETA"].strip() == "7h55m"
    assert lines["Generation"].strip() == "2 (Job none (deleted)), 1 gang restarts of at most 3"
    assert lines["Pods"].strip() == "-l longctx.io/job-name=llama,longctx.io/generation=2 (container trainer)"


def test_status_counts_the_in_place_restarts_of_the_generation_where_the_status_shows_them():
    shown = job(progress=PROGRESS | {"inPlaceRestarts": 1}, workloadGeneration=1)
    shown["spec"]["restartPolicy"] |= {"inPlace": True, "maxInPlaceRestarts": 2}
    lines = dict(line.split(":", 1) for line in jobview.format_status(shown).splitlines())
    assert lines["Generation"].strip() == (
        "1 (Job none (deleted)), 0 gang restarts of at most 3, 1 in-place restarts in this generation of at most 2"
    )
    plain = dict(
        line.split(":", 1) for line in jobview.format_status(job(progress=PROGRESS, workloadGeneration=1)).splitlines()
    )
    assert "in-place" not in plain["Generation"]


def test_status_says_which_load_balance_auto_chose_or_that_it_was_pinned():
    chosen = jobview.format_status(job(layout=LAYOUT | {"loadBalance": "documents"}))
    assert "load balance: documents, chosen by auto (documents with data.packing.documentMask)" in chosen
    pinned = job(layout=LAYOUT | {"loadBalance": "striped"})
    pinned["spec"]["parallelism"]["loadBalance"] = "striped"
    assert "load balance: striped (parallelism.loadBalance)" in " ".join(jobview.format_status(pinned).split())
    assert "load balance" not in jobview.format_status(job(layout=LAYOUT))  # not recorded (older operator)


def test_status_of_a_pinned_attention_says_so_and_a_job_not_planned_says_why():
    pinned = job(layout=LAYOUT | {"attention": "ring"})
    pinned["spec"]["parallelism"] = {"attention": "ring"}
    assert "attention: ring (parallelism.attention)" in " ".join(jobview.format_status(pinned).split())
    failed = job(
        "Failed",
        reason="PlanFailed",
        message="no layout fits",
        conditions=[{"type": "LayoutPlanned", "status": "False", "message": "spec.resources.nodes: no layout fits"}],
    )
    text = jobview.format_status(failed)
    assert "Phase:" in text and "Failed (PlanFailed: no layout fits)" in text
    assert "not planned: spec.resources.nodes: no layout fits" in text


def test_status_before_the_first_progress_read_says_tokens_per_second_are_not_measured_yet():
    text = jobview.format_status(job("Starting", layout=LAYOUT))
    assert "not measured yet, 50,000 estimated by the planner" in text
    assert "Progress" not in text


def test_list_has_a_row_per_job_with_the_layout_and_attention():
    table = jobview.format_list([job(layout=LAYOUT, progress=PROGRESS), job("Pending")], NOW, all_namespaces=True)
    header, first, second = table.splitlines()
    assert header.split() == [
        "NAMESPACE",
        "NAME",
        "PHASE",
        "REASON",
        "DPxCPxTP",
        "ATTENTION",
        "STEP",
        "TOKENS/S",
        "ETA",
        "RESTARTS",
        "AGE",
    ]
    assert first.split() == ["team", "llama", "Running", "-", "2x4x1", "ulysses", "412", "45,000", "7h55m", "0", "2h"]
    assert second.split()[2:6] == ["Pending", "-", "-", "-"]


@pytest.mark.parametrize(
    ("phase", "target", "done", "error"),
    [
        ("Running", "Running", True, False),
        ("Pending", "Running", False, False),
        ("Restarting", "Succeeded", False, False),
        ("Failed", "Succeeded", True, True),
        ("Succeeded", "Running", True, True),
        ("Failed", "Failed", True, False),
    ],
)
def test_wait_ends_at_the_phase_or_at_an_end_that_is_not_it(phase, target, done, error):
    verdict = jobview.wait_verdict(job(phase, reason="RankFailed", message="rank 1 exited 7"), target)
    assert verdict.done is done and bool(verdict.error) is error
    if error:
        assert verdict.error.startswith(f"llama is {phase} (RankFailed: rank 1 exited 7)")


@pytest.mark.parametrize(("text", "seconds"), [("90", 90), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("0", 0)])
def test_durations(text, seconds):
    assert jobview.parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "10x", "m", "1.5h", "-3"])
def test_bad_durations_say_what_a_duration_looks_like(text):
    with pytest.raises(ValueError, match="is not a duration"):
        jobview.parse_duration(text)


def pod(name: str, rank: int | None, created: str = "2026-11-26T10:00:00Z", state=None) -> dict:
    labels = {"longctx.io/job-name": "llama"}
    if rank is not None:
        labels["batch.kubernetes.io/job-completion-index"] = str(rank)
    statuses = [{"name": "trainer", "state": state}] if state else []
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": created},
        "status": {"containerStatuses": statuses},
    }


def test_pods_are_chosen_by_rank_the_newest_of_a_rank_first():
    pods = [
        pod("llama-g2-1-aaa", 1),
        pod("llama-g2-0-old", 0),
        pod("llama-g2-0-new", 0, created="2026-11-26T10:05:00Z"),
        pod("stray", None),
    ]
    chosen = jobview.select_pods(pods, None)
    assert [(rank, p["metadata"]["name"]) for rank, p in chosen] == [(0, "llama-g2-0-new"), (1, "llama-g2-1-aaa")]
    assert [p["metadata"]["name"] for _, p in jobview.select_pods(pods, [1])] == ["llama-g2-1-aaa"]


def test_logs_read_the_current_generation_or_the_one_before():
    assert jobview.log_generation(job(workloadGeneration=3), previous=False) == 3
    assert jobview.log_generation(job(workloadGeneration=3), previous=True) == 2
    assert jobview.log_generation(job("Pending"), previous=False) is None
    assert jobview.pod_selector("llama", 3) == "longctx.io/job-name=llama,longctx.io/generation=3"


def test_a_container_has_logs_once_it_runs_or_ran():
    assert not jobview.container_started(pod("p", 0), "trainer")
    assert not jobview.container_started(pod("p", 0, state={"waiting": {"reason": "ContainerCreating"}}), "trainer")
    assert jobview.container_started(pod("p", 0, state={"running": {}}), "trainer")
    assert jobview.container_started(pod("p", 0, state={"terminated": {"exitCode": 1}}), "trainer")


def test_list_reads_a_partial_layout_leniently():
    table = jobview.format_list([job(layout={"data": 2, "attention": "ring"})], NOW)
    assert "2x?x?" in table
