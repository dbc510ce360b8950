"""What the operator wrote and its watches have not shown yet: not written again meanwhile.

A decision reads the cache, which the watches fill; between a write and its echo (the watch event
of the object written, a second or more on a loaded API server), the next decision of the job
would find the write missing and send it again: a generation's workload created again
(create-or-get: three creates refused, three reads and the ConfigMap's update), a pod's placement
annotated again. Each such write is remembered with its time, and skipped for ECHO_SECONDS or
until the watch shows it; after that it is sent again, as before (the object may have been
deleted, or the annotation changed, by someone else). Pure: the reconciler keeps the memory.
"""

from __future__ import annotations

from dataclasses import replace

from .lifecycle.decision import CreateWorkload, Decision
from .placement import PodPlacement

ECHO_SECONDS = 5.0
"""How long a write of the operator's is taken as done before the watch shows it."""


def without_unechoed_create(decision: Decision, created: tuple[int, float] | None, now: float) -> Decision:
    """`decision`, less its create of the generation this operator created (`created`: the
    generation and when) under ECHO_SECONDS ago, which the cache does not show yet."""
    if created is None or now - created[1] >= ECHO_SECONDS:
        return decision
    kept = tuple(a for a in decision.actions if not (isinstance(a, CreateWorkload) and a.generation == created[0]))
    return replace(decision, actions=kept)


def unechoed_placements(
    due: list[PodPlacement], written: dict[str, tuple[str, float]], now: float
) -> tuple[list[PodPlacement], dict[str, tuple[str, float]]]:
    """The placements of `due` to write, and what is left of `written` (pod uid -> the value
    written and when): a pod whose annotation the cache shows is no longer due, so it is forgotten;
    one written the same value under ECHO_SECONDS ago is not written again."""
    left = {p.uid: written[p.uid] for p in due if p.uid in written and now - written[p.uid][1] < ECHO_SECONDS}
    return [p for p in due if left.get(p.uid, (None,))[0] != p.value], left
