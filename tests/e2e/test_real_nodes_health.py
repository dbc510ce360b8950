"""Hang detection end to end on real nodes (docs/operator.md, "Hang detection"): one rank's
trainer process is stopped with SIGSTOP mid-run; its exporter stops answering and the other rank
waits in a collective. The operator's watchdog reads both ranks, finds that none advanced for the
bound, sets Stalled naming the stopped rank, restarts the gang, which resumes from its last
checkpoint and Succeeds. The trainer's and the operator's images are built from this tree."""

from __future__ import annotations

import json

import pytest
from e2e.test_real_nodes import Job, check_joined, events, phase, resumed_at

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1800)]

CHECKPOINT_INTERVAL = 5
FLOOR_SECONDS = 20
"""hangDetection.floorSeconds of the test's job: its steps take well under 2 s (10 x 2 s = 20 s)."""


def test_a_stopped_rank_is_named_stalled_and_the_gang_resumes(real_cluster):
    job = Job(
        real_cluster,
        {
            "steps": 60,
            "sequenceLength": 512,
            "globalBatchTokens": 1024,
            "checkpoint": {
                "path": "/checkpoints",
                "persistentVolumeClaim": "checkpoints",
                "intervalSteps": CHECKPOINT_INTERVAL,
            },
            "restartPolicy": {"maxRestarts": 0, "maxStallRestarts": 1, "backoffSeconds": 1},
            "hangDetection": {"floorSeconds": FLOOR_SECONDS, "stepFactor": 10},
        },
    )
    try:
        job.wait(
            lambda current: ((current.get("status") or {}).get("progress") or {}).get("lastCheckpointStep"),
            "generation 1 to pass a checkpoint",
        )
        first_rank0, _ = check_joined(job, 1)
        stopped = job.pods(1)[1]["metadata"]["name"]
        # PID 1 is the launcher; its child is the trainer (the rank's process, exporter included).
        real_cluster.kubectl(
            "exec", "-n", job.namespace, stopped, "-c", "trainer", "--",
            "sh", "-c", "kill -STOP $(cat /proc/1/task/1/children)",
        )  # fmt: skip
        restarted = job.wait(
            lambda current: (current.get("status") or {}).get("stallRestarts") == 1,
            "the stall restart",
            timeout=300,
        )
        assert restarted["status"]["restarts"] == 0, restarted["status"]  # counted apart from failures
        listed = json.loads(
            real_cluster.kubectl(
                "get", "events", "-n", job.namespace, "-o", "json",
                "--field-selector", "involvedObject.kind=LongContextJob,reason=Stalled",
            )
        )["items"]  # fmt: skip
        messages = [e["message"] for e in listed if e["type"] == "Warning"]
        assert any(f"rank 1 (pod {stopped}, phase training" in m and "not answering" in m for m in messages), messages
        assert not any("rank 0 (" in m for m in messages), messages
        final = job.wait(lambda current: phase(current) in ("Succeeded", "Failed"), "the job to finish")
        assert phase(final) == "Succeeded" and final["status"]["workloadGeneration"] == 2, job.describe(final)
        last_rank0, _ = check_joined(job, 2)
        assert resumed_at(last_rank0) % CHECKPOINT_INTERVAL == 0  # an interval checkpoint: no save on a hang
        assert last_rank0[-1] == {"event": "done", "step": job.steps}
        assert not any(e["event"] == "resume" for e in first_rank0)
        assert [e for e in events(job.log_text(job.pods(2)[0])) if e["event"] == "done"]
    finally:
        job.delete()
