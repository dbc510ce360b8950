"""lifecycle.planning: the layout planned for a new or changed spec, recorded in the status and
rendered again from it."""

from datetime import timedelta

import pytest

from longctx_operator import conditions as cond
from longctx_operator import reasons
from longctx_operator.api.spec import API_REMAT_POLICY, TRAINER_ATTENTION, TRAINER_LOAD_BALANCE
from longctx_operator.api.status import LongContextJobStatus
from longctx_operator.layout import ResolvedLayout
from support.lifecycle import T0, conditions, running, spec, step


def test_the_chosen_attention_is_recorded_and_rendered_again_from_the_status():
    auto = spec(parallelism={"attention": "auto"})
    d, _ = step(auto, LongContextJobStatus())
    chosen, group = d.status.layout.attention, d.status.layout.ulysses
    assert chosen in TRAINER_ATTENTION and (group is not None) == (chosen == "hybrid")
    assert d.actions[0].layout.attention == TRAINER_ATTENTION[chosen]
    assert d.actions[0].layout.ulysses == (group or 1)
    assert ResolvedLayout.from_status(d.status.layout, auto) == d.actions[0].layout  # what a restart renders
    # A status recorded before the layout carried its attention: the spec's kind (auto: ring).
    old = d.status.layout.model_copy(update={"attention": None})
    assert ResolvedLayout.from_status(old, spec(parallelism={"attention": "allGather"})).attention == "all_gather"
    assert ResolvedLayout.from_status(old, auto).attention == "ring"


def test_the_chosen_remat_policy_is_recorded_and_rendered_again_from_the_status():
    d, _ = step(spec(), LongContextJobStatus())
    chosen = d.actions[0].layout.remat_policy
    assert d.status.layout.remat_policy == API_REMAT_POLICY[chosen]
    assert ResolvedLayout.from_status(d.status.layout, spec()).remat_policy == chosen
    # A status recorded before the layout carried it: full remat, as the trainer ran then.
    assert (
        ResolvedLayout.from_status(d.status.layout.model_copy(update={"remat_policy": None}), spec()).remat_policy
        == "full"
    )


@pytest.mark.parametrize(
    "packing,adaptive,expected",
    [
        ({}, False, "dualChunkSwap"),  # auto without a document mask
        ({"documentMask": True, "separator": 0}, False, "documents"),  # auto with one
        ({"documentMask": True, "separator": 0}, True, "dualChunkSwap"),  # adaptive's ring is dual-chunk-swap's
    ],
)
def test_auto_load_balance_is_resolved_recorded_and_rendered_again(packing, adaptive, expected):
    job = spec(data={"packing": packing}, parallelism={"adaptive": adaptive})
    assert job.parallelism.load_balance == "auto"  # the API's default
    d, _ = step(job, LongContextJobStatus())
    assert d.status.layout.load_balance == expected
    assert d.actions[0].layout.load_balance == TRAINER_LOAD_BALANCE[expected]
    assert ResolvedLayout.from_status(d.status.layout, job) == d.actions[0].layout  # what a restart renders
    pinned = spec(data={"packing": packing}, parallelism={"loadBalance": "striped"})
    assert step(pinned, LongContextJobStatus())[0].status.layout.load_balance == "striped"


def test_the_status_says_why_the_layout_was_chosen():
    from longctx_operator.layout import UNPLANNED_EXPLANATION

    auto, _ = step(spec(parallelism={"attention": "auto"}), LongContextJobStatus())
    assert auto.status.layout.explanation.startswith("fastest of ")
    assert auto.status.layout.explanation.endswith(" fitting layouts and attention kinds (auto)")
    assert auto.status.layout.estimated_tokens_per_second > 0 and auto.status.layout.memory_per_gpu
    cpu = spec(
        resources={"nodes": 2, "gpusPerNode": 1, "gpuType": "cpu"},
        parallelism={"mode": "manual", "data": 1, "context": 2, "tensor": 1},
    )
    assert step(cpu, LongContextJobStatus())[0].status.layout.explanation == UNPLANNED_EXPLANATION


def test_planning_warns_once_about_checkpoints_a_restart_cannot_find():
    s = spec(checkpoint={"persistentVolumeClaim": None})
    planned, _ = step(s, LongContextJobStatus())
    assert [(e.type, e.reason) for e in planned.events] == [
        ("Normal", reasons.PLANNED),
        ("Warning", reasons.CHECKPOINT_NOT_PERSISTENT),
        ("Normal", reasons.GANG_FITS),
    ]
    assert "2 different disks" in planned.events[1].message
    again, _ = step(s, planned.status, running(), now=T0 + timedelta(seconds=5))
    assert reasons.CHECKPOINT_NOT_PERSISTENT not in [e.reason for e in again.events]


def test_planner_rejection_fails_the_job():
    bad = spec(
        sequenceLength=4096,
        resources={"nodes": 1, "gpusPerNode": 8},
        parallelism={"mode": "manual", "data": 1, "context": 3, "tensor": 1},
    )
    d, asked = step(bad, LongContextJobStatus())
    assert not asked and d.actions == ()
    assert (d.status.phase, d.status.reason) == ("Failed", reasons.PLAN_FAILED)
    assert conditions(d.status)[cond.LAYOUT_PLANNED][0] == "False"


def test_spec_change_is_replanned_for_the_next_generation_only():
    s = spec()
    admitted, _ = step(s, LongContextJobStatus())
    run, _ = step(s, admitted.status, running())
    changed, _ = step(spec(steps=20), run.status, running(), spec_generation=2)
    assert changed.actions == () and changed.status.observed_generation == 2
    assert changed.status.phase == "Running" and changed.status.workload_generation == 1
