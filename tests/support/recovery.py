"""Time to recover, broken down: from a gang's failure (or preemption) to the first training step
of the generation that replaced it, read from what the cluster and the pods recorded (status,
object timestamps, and the trainer's log lines with kubectl's timestamps). The real-node e2e test of
a dead node prints it (tests/e2e/test_real_nodes_health.py); docs/operator.md records a run.

Stages, each measured from the end of the one before. A failure (`breakdown`): detect (the
failure to status.lastRestart.time: the operator's decision), delete (to the next generation's Job
created: the old gang deleted, the backoff). A preemption in place (`preemption_breakdown`: a pod
deleted gracefully, the same Job replaces the pods): save (to rank 0's "preempted" line: the ranks
finished their step, agreed on it and saved it), stop (to rank 0's old trainer container's end).
An in-place restart (`in_place_breakdown`: a trainer crashed, the launchers restarted the trainers
inside the same pods): agree (from the crashed trainer's own line to the last launcher's "stopping"
line: the failure reported and the restart ordered), stop (to the last "starting ... again" line:
every launcher's trainers ended), then rendezvous, restore, compile and first step as below, in
the trainers' second epoch. Then, for a failure and a preemption: schedule (to the last new pod
scheduled), start (to the last trainer container started), and for all three rendezvous (to the
last rank's "joined" line), restore (to rank 0's "resume" line: step functions built, checkpoint
read), compile (to rank 0's "compiled" line: tracing and compiling the step, or loading it from
the compilation cache) and first step (to rank 0's first "step" line).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

START_STAGES = ("schedule", "start", "rendezvous", "restore", "compile", "first step")
STAGES = ("detect", "delete", *START_STAGES)
PREEMPTION_STAGES = ("save", "stop", *START_STAGES)
IN_PLACE_STAGES = ("agree", "stop", *START_STAGES[2:])


def _time(text: str) -> datetime:
    """An RFC 3339 time as the API server or kubectl --timestamps writes it (nanoseconds cut)."""
    head, _, frac = text.rstrip("Z").partition(".")
    return datetime.fromisoformat(head + (f".{frac[:6]}" if frac else "")).replace(tzinfo=UTC)


def log_events(text: str) -> list[tuple[datetime, dict]]:
    """(kubectl's timestamp, event) of the trainer's JSON lines in `kubectl logs --timestamps` output."""
    out = []
    for line in text.splitlines():
        stamp, _, rest = line.partition(" ")
        if rest.startswith("{"):
            try:
                event = json.loads(rest)
            except ValueError:
                continue
            if isinstance(event, dict) and "event" in event:
                out.append((_time(stamp), event))
    return out


def _first(events: list[tuple[datetime, dict]], name: str) -> datetime:
    return next(when for when, event in events if event["event"] == name)


def _start_marks(pods: list[dict], logs: list[str]) -> list[datetime]:
    """When the new gang reached each of START_STAGES: `pods` rank 0 first, `logs` their trainer
    containers' `kubectl logs --timestamps` in the same order."""

    def last_condition(kind: str) -> datetime:
        return max(_time(c["lastTransitionTime"]) for p in pods for c in p["status"]["conditions"] if c["type"] == kind)

    events = [log_events(text) for text in logs]
    return [
        last_condition("PodScheduled"),
        max(
            _time(
                c["state"]["running"]["startedAt"] if "running" in c["state"] else c["state"]["terminated"]["startedAt"]
            )
            for p in pods
            for c in p["status"]["containerStatuses"]
            if c["name"] == "trainer"
        ),
        max(_first(e, "joined") for e in events),
        _first(events[0], "resume"),
        _first(events[0], "compiled"),
        _first(events[0], "step"),
    ]


def _stages(began: datetime, stages: tuple[str, ...], marks: list[datetime]) -> dict[str, float]:
    out, before = {}, began
    for stage, mark in zip(stages, marks, strict=True):
        out[stage] = round((mark - before).total_seconds(), 1)
        before = max(before, mark)
    return out


def breakdown(failed: datetime, status: dict, workload: dict, pods: list[dict], logs: list[str]) -> dict[str, float]:
    """Seconds of each stage in STAGES. `status`: the LongContextJob's status after the restart;
    `workload`: the new generation's Job; `pods`: its pods, rank 0 first; `logs`: their trainer
    containers' `kubectl logs --timestamps`, in the same order."""
    marks = [_time(status["lastRestart"]["time"]), _time(workload["metadata"]["creationTimestamp"])]
    return _stages(failed, STAGES, marks + _start_marks(pods, logs))


def preemption_breakdown(
    preempted: datetime, old_rank0: dict, old_rank0_log: str, pods: list[dict], logs: list[str]
) -> dict[str, float]:
    """Seconds of each stage in PREEMPTION_STAGES. `preempted`: when the pod was deleted;
    `old_rank0`, `old_rank0_log`: rank 0's pod that saved and ended, and its log; `pods`, `logs`:
    the pods that replaced the gang, rank 0 first, and theirs."""
    (ended,) = [c["state"]["terminated"] for c in old_rank0["status"]["containerStatuses"] if c["name"] == "trainer"]
    marks = [_first(log_events(old_rank0_log), "preempted"), _time(ended["finishedAt"])]
    return _stages(preempted, PREEMPTION_STAGES, marks + _start_marks(pods, logs))


def table(seconds: dict[str, float]) -> str:
    """The breakdown as a Markdown table, with the total."""
    rows = [f"| {stage} | {value:.0f} s |" for stage, value in seconds.items()]
    return "\n".join(["| stage | time |", "|---|---|", *rows, f"| **total** | **{sum(seconds.values()):.0f} s** |"])


def _first_line(text: str, needle: str) -> datetime:
    """kubectl's timestamp of the first line of `text` that holds `needle`."""
    return next(_time(line.partition(" ")[0]) for line in text.splitlines() if needle in line)


def in_place_breakdown(crashed: str, logs: list[str], epoch: int = 1) -> dict[str, float]:
    """Seconds of each stage in IN_PLACE_STAGES for in-place restart `epoch`. `crashed`: the
    crashed trainer's last line (its own words, e.g. the fault's); `logs`: every pod's trainer
    container log with kubectl's timestamps, rank 0 first (launcher and trainers share it)."""
    began = min(_first_line(text, crashed) for text in logs if crashed in text)
    stopping = max(_first_line(text, f"in-place restart {epoch}: rank ") for text in logs)
    starting = max(_first_line(text, f"in-place restart {epoch}: starting") for text in logs)
    later = [[(when, e) for when, e in log_events(text) if when >= starting] for text in logs]
    marks = [
        stopping,
        starting,
        max(_first(e, "joined") for e in later),
        _first(later[0], "resume"),
        _first(later[0], "compiled"),
        _first(later[0], "step"),
    ]
    return _stages(began, IN_PLACE_STAGES, marks)
