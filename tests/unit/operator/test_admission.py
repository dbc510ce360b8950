"""operator/admission.py: builtin gang admission against hand-counted nodes and pods, its backoff,
and the operator's admission policy (which modes jobs may use)."""

import pytest

from longctx_operator import reasons
from longctx_operator.admission import (
    GangRequest,
    admission_backoff,
    admit_gang,
    free_gpus,
    node_matches,
    pod_gpus,
    pod_may_use,
    quantity,
    scheduling_for,
    tolerates,
)
from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.config import OperatorConfig

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
H100 = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}


def node(name, gpus=8, labels=H100, taints=(GPU_TAINT,), ready=True, unschedulable=False):
    return {
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"taints": list(taints), "unschedulable": unschedulable},
        "status": {
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(node_name, gpus, phase="Running"):
    return {
        "spec": {
            "nodeName": node_name,
            "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}, {"resources": {}}],
        },
        "status": {"phase": phase},
    }


def gang(pods, gpus=8):
    return GangRequest(pods=pods, gpus_per_pod=gpus, node_selector=dict(H100), tolerations=[GPU_TOLERATION])


def test_pod_gpus_sums_containers_and_prefers_requests():
    assert pod_gpus(pod("n", 4)) == 4
    both = {
        "spec": {
            "containers": [{"resources": {"requests": {"nvidia.com/gpu": "2"}, "limits": {"nvidia.com/gpu": "2"}}}] * 2
        }
    }
    assert pod_gpus(both) == 4


@pytest.mark.parametrize(
    ("served", "gpus"),
    [
        ("8", 8),
        ("1k", 1000),  # a whole number the API server accepts for an extended resource, served so
        ("2e3", 2000),
        ("1E3", 1000),
        ("8000m", 8),
        ("1Ki", 1024),
        ("+4", 4),
        (None, 0),
        ("-1", 0),
        ("1e99999", 2**63 - 1),  # bounded as the API server's int64 is
        ("eight", 0),  # nothing the API server serves; never an exception that stops admission
        ("1ki", 0),
    ],
)
def test_a_gpu_quantity_is_read_in_every_form_the_api_server_serves(served, gpus):
    assert quantity(served) == gpus


def test_free_gpus_ignores_finished_pods():
    nodes = [node("a"), node("b")]
    pods = [pod("a", 8), pod("b", 3), pod("b", 8, phase="Succeeded"), pod("b", 8, phase="Failed")]
    assert free_gpus(nodes, pods) == {"a": 0, "b": 5}


def test_tolerations():
    assert tolerates([GPU_TOLERATION], GPU_TAINT)
    assert tolerates([{"operator": "Exists"}], GPU_TAINT)
    assert tolerates([{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}], GPU_TAINT)
    assert not tolerates([{"key": "nvidia.com/gpu", "value": "other"}], GPU_TAINT)
    assert not tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], GPU_TAINT)
    assert not tolerates([], GPU_TAINT)


def test_node_matching_needs_labels_tolerations_readiness():
    request = gang(1)
    assert node_matches(node("a"), request)
    assert not node_matches(node("a", labels={"nvidia.com/gpu.product": "NVIDIA-A100"}), request)
    assert not node_matches(node("a", ready=False), request)
    assert not node_matches(node("a", unschedulable=True), request)
    assert not node_matches(node("a"), GangRequest(1, 8, dict(H100), []))
    soft = {"key": "x", "effect": "PreferNoSchedule"}
    assert node_matches(node("a", taints=(GPU_TAINT, soft)), request)


def test_gang_fits_exactly():
    nodes = [node(n) for n in "abcd"]
    verdict = admit_gang(gang(2), nodes, [pod("a", 8), pod("b", 1)])  # c and d are free
    assert verdict.fits and verdict.reason == reasons.GANG_FITS


def test_gang_does_not_fit_and_says_why():
    nodes = [node(n) for n in "abcd"] + [node("e", labels={})]
    verdict = admit_gang(gang(3), nodes, [pod("a", 8), pod("b", 1)])
    assert not verdict.fits and verdict.reason == reasons.INSUFFICIENT_GPUS
    assert "needs 3 nodes with 8 free nvidia.com/gpu" in verdict.message
    assert "2 available of 4 matching nodes" in verdict.message


def waiting_pod(gpus=8, node_selector=None, tolerations=(GPU_TOLERATION,), affinity=None):
    """A GPU pod the scheduler has not bound yet."""
    spec = {
        "containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        "nodeSelector": dict(node_selector or {}),
        "tolerations": list(tolerations),
    }
    if affinity:
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": affinity}}
    return {"spec": spec, "status": {"phase": "Pending"}}


def terms(*expressions, fields=()):
    return {"nodeSelectorTerms": [{"matchExpressions": list(expressions), "matchFields": list(fields)}]}


def test_unscheduled_gpu_pods_and_reservations_take_nodes():
    nodes = [node(n) for n in "abcd"]
    assert admit_gang(gang(3), nodes, [waiting_pod()]).fits
    assert not admit_gang(gang(4), nodes, [waiting_pod()]).fits
    assert not admit_gang(gang(3), nodes, [], reserved_nodes=2).fits


def test_partial_gpu_requests():
    nodes = [node("a"), node("b")]
    assert admit_gang(gang(2, gpus=4), nodes, [pod("a", 4), pod("b", 2)]).fits
    assert not admit_gang(gang(2, gpus=4), nodes, [pod("a", 5)]).fits


def test_cpu_gangs_are_left_to_the_scheduler():
    assert admit_gang(GangRequest(pods=100, gpus_per_pod=0), [], []).fits


def test_reservations_shrink_as_pods_appear_and_lapse():
    from longctx_operator.admission import Reservations

    now = [100.0]
    held = Reservations(hold_seconds=30, clock=lambda: now[0])
    held.reserve("a", nodes=3, generation=1)
    held.reserve("b", nodes=2, generation=4)
    seen = {("a", 1): 1, ("b", 4): 0}

    def count(key, generation):
        return seen[(key, generation)]

    assert held.held_by_others("b", count) == 2  # a: 3 promised, 1 pod already counts by itself
    assert held.held_by_others("a", count) == 2
    seen[("a", 1)] = 3  # all of a's pods exist: its reservation is spent
    assert held.held_by_others("b", count) == 0
    now[0] += 31  # b's lapses
    assert held.held_by_others("a", count) == 0


def test_waiting_pods_that_cannot_use_the_gangs_nodes_take_none_of_them():
    """Another tenant's gang that can never be scheduled (a pool no node has, a taint it does not
    tolerate, an affinity no node meets, more GPUs than any node has free) holds no node of this one."""
    nodes = [node(n) for n in "abcd"]
    stuck = [
        waiting_pod(node_selector={"pool": "nowhere"}),
        waiting_pod(tolerations=()),
        waiting_pod(affinity=terms({"key": "pool", "operator": "In", "values": ["nowhere"]})),
        waiting_pod(gpus=16),
    ] * 8
    verdict = admit_gang(gang(4), nodes, stuck)
    assert verdict.fits, verdict.message
    assert not admit_gang(gang(4), nodes, [*stuck, waiting_pod(node_selector=H100)]).fits


def test_pod_may_use_reads_node_selector_affinity_and_taints():
    gpu_node = node("a", labels={**H100, "rank": "5"})
    assert pod_may_use(waiting_pod(node_selector=H100), gpu_node)
    assert not pod_may_use(waiting_pod(node_selector={"nvidia.com/gpu.product": "A100"}), gpu_node)
    assert not pod_may_use(waiting_pod(tolerations=()), gpu_node)
    matching = [
        {"key": "rank", "operator": "In", "values": ["5", "6"]},
        {"key": "zone", "operator": "NotIn", "values": ["x"]},
        {"key": "rank", "operator": "Exists"},
        {"key": "zone", "operator": "DoesNotExist"},
        {"key": "rank", "operator": "Gt", "values": ["4"]},
        {"key": "rank", "operator": "Lt", "values": ["6"]},
    ]
    for expression in matching:
        assert pod_may_use(waiting_pod(affinity=terms(expression)), gpu_node), expression
    absent = {"key": "rank", "operator": "DoesNotExist"}
    assert not pod_may_use(waiting_pod(affinity=terms(*matching, absent)), gpu_node)  # a term ANDs them
    assert not pod_may_use(waiting_pod(affinity=terms({"key": "rank", "operator": "Gt", "values": ["x"]})), gpu_node)
    by_name = terms(fields=[{"key": "metadata.name", "operator": "In", "values": ["a"]}])
    assert pod_may_use(waiting_pod(affinity=by_name), gpu_node)
    assert not pod_may_use(waiting_pod(affinity=by_name), node("b"))
    either = {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Exists"}]}, {}]}
    assert not pod_may_use(waiting_pod(affinity=either), gpu_node)  # an empty term matches nothing


def test_a_refused_admission_backs_off_from_5_to_30_seconds():
    assert [admission_backoff(n) for n in range(1, 6)] == [5, 10, 20, 30, 30]


def job_spec(**scheduling) -> LongContextJobSpec:
    return LongContextJobSpec.model_validate(
        {"model": {"preset": "tiny"}, "sequenceLength": 4096, "scheduling": scheduling}
    )


def test_the_operator_may_allow_only_some_admission_modes():
    config = OperatorConfig(admission_modes=["builtin", "kueue"])
    spec, error = scheduling_for(job_spec(admission="none"), config)
    assert error == (
        "scheduling.admission none is not allowed by this operator's configuration (admissionModes: builtin, kueue)"
    )
    assert scheduling_for(job_spec(admission="builtin"), config) == (job_spec(admission="builtin"), None)
    assert scheduling_for(job_spec(admission="none"), OperatorConfig())[1] is None


def test_the_operator_may_force_kueue_with_a_default_queue():
    forced = OperatorConfig(force_admission="kueue", default_kueue_queue="team-queue")
    spec, error = scheduling_for(job_spec(admission="none"), forced)
    assert error is None and (spec.scheduling.admission, spec.scheduling.queue_name) == ("kueue", "team-queue")
    own = scheduling_for(job_spec(admission="kueue", queueName="mine"), forced)[0]
    assert own.scheduling.queue_name == "mine"
    spec, error = scheduling_for(job_spec(admission="builtin"), OperatorConfig(force_admission="kueue"))
    assert "scheduling.queueName" in error and "defaultKueueQueue" in error
    builtin = scheduling_for(job_spec(admission="kueue", queueName="q"), OperatorConfig(force_admission="builtin"))[0]
    assert builtin.scheduling.admission == "builtin"


@pytest.mark.parametrize("bad", [{"admissionModes": []}, {"forceAdmission": "sometimes"}, {"defaultKueueQueue": "a b"}])
def test_admission_settings_are_checked(bad):
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=next(iter(bad))):
        OperatorConfig.model_validate(bad)


def test_gpus_held_by_pods_outside_the_watch_count_with_the_jobs_own():
    nodes = [node("a"), node("b"), node("c")]
    assert free_gpus(nodes, [pod("a", 3)], held={"a": 2, "c": 8}) == {"a": 3, "b": 8, "c": 0}
    assert admit_gang(gang(2), nodes, [pod("a", 3)], held={"c": 8}).fits is False
    assert admit_gang(gang(2), nodes, [pod("a", 3)], held={"c": 1}).fits is False
    assert admit_gang(gang(2), nodes, [], held={"c": 8}).fits is True


def test_node_matches_rematches_only_nodes_whose_object_changed():
    """The cache replaces a node's object when it changes; NodeMatches keeps its verdict for the
    same object (shown by mutating one in place, which the cache never does) and re-matches a new one."""
    from longctx_operator.admission import NodeMatches

    matches = NodeMatches()
    a, b = node("a"), node("b", labels={})
    assert [n["metadata"]["name"] for n in matches.matching(gang(1), [a, b])] == ["a"]
    a["metadata"]["labels"] = {}  # in place: remembered, not matched again
    assert [n["metadata"]["name"] for n in matches.matching(gang(1), [a, b])] == ["a"]
    b = node("b")  # a new object: matched again
    assert [n["metadata"]["name"] for n in matches.matching(gang(1), [a, b])] == ["a", "b"]
    assert [n["metadata"]["name"] for n in matches.matching(gang(1), [b])] == ["b"]  # a is gone
    other = GangRequest(pods=1, gpus_per_pod=8)  # another shape: matched on its own (b is tainted)
    assert matches.matching(other, [b]) == []


def test_a_fit_still_stands_while_enough_of_its_free_nodes_are_not_reserved_since():
    from longctx_operator.admission import still_fits

    verdict = admit_gang(gang(2), [node(n) for n in "abcd"], [])
    assert verdict.fits and verdict.available == 4
    assert still_fits(verdict, gang(2), reserved_since=2)
    assert not still_fits(verdict, gang(2), reserved_since=3)
    refused = admit_gang(gang(5), [node(n) for n in "abcd"], [])
    assert refused.available == 4 and not still_fits(refused, gang(5), reserved_since=0)


def test_a_fit_stands_with_nothing_reserved_since_and_for_a_gang_without_gpus():
    """A CPU gang fits with no free GPU node counted (available 0): its fit must stand, or the
    reconciler counts it again forever (the real-node quickstart hung that way, 2026-11-27)."""
    from longctx_operator.admission import still_fits

    cpu = admit_gang(gang(2, gpus=0), [], [])
    assert cpu.fits and cpu.available == 0
    assert still_fits(cpu, gang(2, gpus=0), reserved_since=0)
    assert still_fits(cpu, gang(2, gpus=0), reserved_since=3)
    tight = admit_gang(gang(2), [node(n) for n in "ab"], [])
    assert still_fits(tight, gang(2), reserved_since=0)
    assert not still_fits(tight, gang(2), reserved_since=1)
