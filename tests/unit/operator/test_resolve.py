"""operator/resolve.py: a spec's plan, and its rejection, are computed once (the reconciler plans in
its threads first, and the decision on the event loop finds the result)."""

import pytest

from longctx_operator import resolve
from longctx_operator.planner import PlanError
from support.lifecycle import spec


def test_a_plan_and_a_rejection_are_each_computed_once(monkeypatch):
    calls: list[object] = []
    real = resolve.plan

    def counting(request):
        calls.append(request)
        return real(request)

    monkeypatch.setattr(resolve, "plan", counting)
    resolve._plan.cache_clear()
    planned = spec()
    assert resolve.resolve_layout(planned)[1] is resolve.resolve_layout(planned)[1]
    assert len(calls) == 1

    def refusing(request):
        calls.append(request)
        raise PlanError("no layout fits", "spec.resources.nodes")

    monkeypatch.setattr(resolve, "plan", refusing)
    rejected = spec(sequenceLength=8192)
    for _ in range(2):  # the same rejection each time, raised afresh
        with pytest.raises(PlanError) as error:
            resolve.resolve_layout(rejected)
        assert (error.value.field, error.value.message) == ("spec.resources.nodes", "no layout fits")
    assert len(calls) == 2  # one plan, one rejection
