"""Time to recover, broken down: from a gang's failure (or preemption) to the first training step
of the generation that replaced it, read from what the cluster and the pods recorded (status,
object timestamps, and the trainer's log lines with kubectl's timestamps). The real-node e2e test of
a dead node prints it (tests/e2e/test_real_nodes_health.py); docs/operator.md records a run.

Stages, each measured from the end of the one before:
detect (the failure to status.lastRestart.time: the operator's decision), delete (to the next
generation's Job created: the old gang deleted, the backoff), schedule (to the last pod scheduled),
start (to the last trainer container started), rendezvous (to the last rank's "joined" line),
restore (to rank 0's "resume" line: step functions built, checkpoint read) and compile (to rank 0's
first "step" line: compiling and running the first step).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

STAGES = ("detect", "delete", "schedule", "start", "rendezvous", "restore", "compile")


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


def breakdown(failed: datetime, status: dict, workload: dict, pods: list[dict], logs: list[str]) -> dict[str, float]:
    """Seconds of each stage in STAGES. `status`: the LongContextJob's status after the restart;
    `workload`: the new generation's Job; `pods`: its pods, rank 0 first; `logs`: their trainer
    containers' `kubectl logs --timestamps`, in the same order."""

    def last_condition(kind: str) -> datetime:
        return max(_time(c["lastTransitionTime"]) for p in pods for c in p["status"]["conditions"] if c["type"] == kind)

    events = [log_events(text) for text in logs]
    marks = [
        _time(status["lastRestart"]["time"]),
        _time(workload["metadata"]["creationTimestamp"]),
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
        _first(events[0], "step"),
    ]
    out, before = {}, failed
    for stage, mark in zip(STAGES, marks, strict=True):
        out[stage] = round((mark - before).total_seconds(), 1)
        before = max(before, mark)
    return out


def table(seconds: dict[str, float]) -> str:
    """The breakdown as a Markdown table, with the total."""
    rows = [f"| {stage} | {value:.0f} s |" for stage, value in seconds.items()]
    return "\n".join(["| stage | time |", "|---|---|", *rows, f"| **total** | **{sum(seconds.values()):.0f} s** |"])
