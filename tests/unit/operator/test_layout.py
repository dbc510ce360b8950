"""longctx_operator.layout: the resolved layout, built by keyword only, and its one crossing to and
from the status (the API's camelCase spelling of the trainer's choices)."""

import pytest

from longctx_operator.layout import UNPLANNED_EXPLANATION, ResolvedLayout
from support.lifecycle import spec

CPU_JOB = {
    "resources": {"nodes": 2, "gpusPerNode": 1, "gpuType": "cpu"},
    "parallelism": {"mode": "manual", "data": 1, "context": 4, "tensor": 1, "attention": "allGather"},
}


def test_a_cpu_layout_is_recorded_in_the_apis_spelling_and_read_back_unchanged():
    job = spec(**CPU_JOB, data={"packing": {"documentMask": True, "separator": 0}})
    layout = ResolvedLayout.manual(job)
    assert (layout.attention, layout.load_balance, layout.remat_policy) == ("all_gather", "documents", "full")
    status = layout.to_status(job, None)
    assert (status.attention, status.load_balance, status.remat_policy) == ("allGather", "documents", "full")
    assert (status.processes, status.explanation, status.ulysses) == (2, UNPLANNED_EXPLANATION, None)
    assert ResolvedLayout.from_status(status, job) == layout


def test_hybrids_group_size_is_recorded_only_for_hybrid():
    job = spec(**{**CPU_JOB, "parallelism": {**CPU_JOB["parallelism"], "attention": "hybrid", "ulysses": 2}})
    status = ResolvedLayout.manual(job).to_status(job, None)
    assert (status.attention, status.ulysses, status.load_balance) == ("hybrid", 2, "dualChunkSwap")
    assert ResolvedLayout.from_status(status, job).ulysses == 2


def test_the_layout_is_built_by_keyword_only():
    with pytest.raises(TypeError):
        ResolvedLayout(1, 8, 4, 1)  # which is context and which tensor is not left to the order
