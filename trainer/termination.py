"""How a preempted trainer ends, for the trainer that ends so and the operator that reads it: plain
data, no JAX import (operator/preemption.py, operator/observe.py and trainer/preemption.py)."""

from __future__ import annotations

PREEMPTED_EXIT_CODE = 85
"""A trainer stopped by SIGTERM that saved a checkpoint first exits with this code, never 0: an
Indexed Job counts an index whose pod exits 0 as done for good, so a preempted gang would read as
completed and a resumed Job would not restart those indexes. The operator renders a pod failure
policy that ignores this code (no failure counted; the Job controller replaces the pod) and reads
the step from the termination message (`PREEMPTED_MESSAGE`)."""

PREEMPTED_MESSAGE = "preempted: checkpoint at step {step}"
"""The container's termination message after such a save (/dev/termination-log)."""
