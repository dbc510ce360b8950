"""Which pods a generation's delete stops sooner than their grace period (reconciler.stop_pods)."""

from longctx_operator.lifecycle.decision import BROKEN_GANG_GRACE_SECONDS, DeleteWorkload
from longctx_operator.reconciler import stop_pods


def pod(name: str) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}"}}


PODS = [pod("j-g1-0"), pod("j-g1-1")]


def test_a_broken_gang_stops_every_pod_within_the_short_grace():
    action = DeleteWorkload(1, "job-uid", broken=True)
    assert stop_pods(PODS, action) == [
        ("j-g1-0", "uid-j-g1-0", BROKEN_GANG_GRACE_SECONDS),
        ("j-g1-1", "uid-j-g1-1", BROKEN_GANG_GRACE_SECONDS),
    ]


def test_a_lost_pod_goes_at_once_and_the_others_of_a_broken_gang_soon():
    action = DeleteWorkload(1, "job-uid", ("j-g1-1",), broken=True)
    assert stop_pods(PODS, action) == [("j-g1-0", "uid-j-g1-0", BROKEN_GANG_GRACE_SECONDS), ("j-g1-1", "uid-j-g1-1", 0)]


def test_a_deliberate_delete_leaves_the_pods_their_grace_period_to_save():
    """spec.suspend or a spec change: the ranks may still finish their step and save."""
    assert stop_pods(PODS, DeleteWorkload(1, "job-uid")) == []
