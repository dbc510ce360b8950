"""After a SIGTERM: the in-pod launcher's watch for a trainer process that can no longer stop well.

A SIGTERM asks the trainer to save and exit (trainer/preemption.py): it finishes its step, the
ranks agree on a step, save it and exit. A rank whose peer is gone cannot: it is blocked in a
collective with the dead peer (the Job controller deletes a failed rank's survivors, and this pod
may be one), and only JAX's heartbeat timeout (100 s) or the pod's grace period (a step plus a
checkpoint write, with a margin) ends it. The launcher reads each of its processes' own health
metrics (contract/health.py) on localhost and kills a process that, since the SIGTERM, has gone
STOP_STEPS of its step times (at least STOP_FLOOR_SECONDS) with no heartbeat (no step finished, no
phase entered) while not writing a checkpoint. A process whose metrics it cannot read is left to
the grace period.
"""

from __future__ import annotations

import urllib.request
from dataclasses import dataclass

from .contract.exposition import MAX_BODY_BYTES, MetricsUnreadable, health_values
from .contract.health import HEARTBEAT, PHASE, STEP_SECONDS, Phase

STOP_STEPS = 3
STOP_FLOOR_SECONDS = 30.0
"""The floor covers the ranks' agreement on the step to save, up to two more steps (JAX's
preemption sync point), and a step time that varies."""
SAVING: Phase = "checkpointing"


@dataclass(frozen=True)
class Health:
    phase: str | None
    heartbeat: float | None
    step_seconds: float | None


def parse_health(body: bytes) -> Health:
    """The phase, heartbeat and last step time in one process's metrics page (read by the
    operator's bounded scanner, contract/exposition.py)."""
    values = health_values(body)
    return Health(values.get(PHASE), values.get(HEARTBEAT), values.get(STEP_SECONDS))


def read_health(port: int, timeout: float = 1.0) -> Health | None:
    """The health served on localhost `port`, or None when it cannot be read."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=timeout) as response:
            return parse_health(response.read(MAX_BODY_BYTES))
    except (OSError, MetricsUnreadable):
        return None


class StopWatch:
    """One process's watch, from the SIGTERM on: `stuck(health, now)` is True once it cannot stop."""

    def __init__(self, since: float, floor: float = STOP_FLOOR_SECONDS, steps: int = STOP_STEPS):
        self.floor, self.steps = floor, steps
        self._heartbeat: float | None = None
        self._quiet_since = since

    def stuck(self, health: Health | None, now: float) -> bool:
        if health is None or health.heartbeat is None:
            return False
        if health.heartbeat != self._heartbeat or health.phase == SAVING:
            self._heartbeat, self._quiet_since = health.heartbeat, now
            return False
        bound = max(self.floor, self.steps * (health.step_seconds or 0.0))
        return now - self._quiet_since > bound
