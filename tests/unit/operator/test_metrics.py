"""operator/metrics.py: the phase gauge kept from each job's phase (PhaseCounts)."""

from prometheus_client import REGISTRY

from longctx_operator.metrics import PHASES, PhaseCounts


def gauge() -> dict[str, float]:
    return {p: REGISTRY.get_sample_value("longctx_operator_jobs", {"phase": p}) for p in PHASES}


def test_the_phase_gauge_moves_a_job_between_phases_and_drops_it_when_deleted():
    phases = PhaseCounts()
    assert set(gauge().values()) == {0}  # every phase exported from the start
    phases.see(("a", "one"), None)  # no status yet: Pending
    phases.see(("a", "two"), "Running")
    phases.see(("a", "one"), "Admitted")
    phases.see(("a", "one"), "Admitted")  # the same phase again counts once
    assert {p: n for p, n in gauge().items() if n} == {"Admitted": 1, "Running": 1}
    phases.forget(("a", "one"))
    phases.forget(("a", "never-seen"))
    assert {p: n for p, n in gauge().items() if n} == {"Running": 1}
