"""operator/echo.py: writes the watches have not shown yet are not sent again, for a while."""

from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.echo import ECHO_SECONDS, unechoed_placements, without_unechoed_create
from longctx_operator.layout import ResolvedLayout
from longctx_operator.lifecycle.decision import CreateWorkload, Decision, DeleteWorkload
from longctx_operator.placement import PodPlacement


def decision(*actions) -> Decision:
    return Decision(LongContextJobStatus(phase="Admitted"), actions=actions, requeue_after=1.0)


def create(generation: int) -> CreateWorkload:
    return CreateWorkload(generation, ResolvedLayout(data=1, context=2, tensor=1, processes_per_node=1))


def test_a_create_of_the_generation_just_created_is_dropped_until_the_echo_is_overdue():
    assert without_unechoed_create(decision(create(1)), (1, 100.0), now=101.0).actions == ()
    assert without_unechoed_create(decision(create(1)), (1, 100.0), now=101.0).requeue_after == 1.0
    assert without_unechoed_create(decision(create(1)), (1, 100.0), now=100.0 + ECHO_SECONDS).actions == (create(1),)
    assert without_unechoed_create(decision(create(2)), (1, 100.0), now=101.0).actions == (create(2),)
    assert without_unechoed_create(decision(create(1)), None, now=101.0).actions == (create(1),)
    other = DeleteWorkload(1, "uid")
    assert without_unechoed_create(decision(other, create(1)), (1, 100.0), now=101.0).actions == (other,)


def test_a_placement_written_is_not_written_again_until_shown_or_overdue():
    a, b = PodPlacement("a", "uid-a", "r1"), PodPlacement("b", "uid-b", "r2")
    written = {"uid-a": ("r1", 100.0), "uid-b": ("r0", 100.0), "uid-gone": ("r3", 100.0)}
    todo, left = unechoed_placements([a, b], written, now=101.0)
    assert todo == [b]  # a's write is on its way; b's node now says r2
    assert left == {"uid-a": ("r1", 100.0), "uid-b": ("r0", 100.0)}  # uid-gone is shown (not due): forgotten
    assert unechoed_placements([a], written, now=100.0 + ECHO_SECONDS) == ([a], {})
