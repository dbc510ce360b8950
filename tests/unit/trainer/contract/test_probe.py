"""trainer/probe.py: the compute probe runs on every given device, with no collective, and its
time is the median of its last PROBE_KEPT runs; the link probe's rounds pair every node with
others (tests/integration/test_link_probe.py runs it across processes)."""

import itertools

import jax
import pytest

from longctx_trainer import probe
from longctx_trainer.contract.health import LINK_PROBE_ROUNDS, link_rounds, probe_work


def test_the_probe_time_is_the_median_of_the_last_runs():
    class Scripted(probe.ComputeProbe):
        times = iter([9.0, 1.0, 50.0, 2.0, 3.0, 4.0, 5.0, 6.0])  # the first: the compiling run

        def _time(self):
            return next(self.times)

    scripted = Scripted(jax.devices()[:2])
    assert [scripted.measure() for _ in range(7)] == [1.0, 25.5, 2.0, 2.5, 3.0, 4.0, 4.0]


def test_the_probe_runs_on_each_device_without_a_collective():
    devices = jax.devices()[:2]
    real = probe.ComputeProbe(devices)
    assert real.measure() > 0
    assert [x.devices() for x in real._inputs] == [{d} for d in devices]
    _, matmuls, _ = probe_work("cpu")
    hlo = jax.jit(probe._chain, static_argnums=1).lower(real._inputs[0], matmuls).as_text()
    assert not any(op in hlo for op in ("all-reduce", "all-gather", "collective-permute", "all-to-all"))


@pytest.mark.parametrize("nodes", range(3, 20))
def test_each_round_pairs_disjoint_nodes_and_no_pair_meets_twice(nodes):
    rounds = link_rounds(nodes)
    assert len(rounds) == min(LINK_PROBE_ROUNDS, nodes - 1 if nodes % 2 == 0 else nodes)
    met = [pair for pairs in rounds for pair in pairs]
    assert len(met) == len(set(met))
    for pairs in rounds:
        seated = [n for pair in pairs for n in pair]
        assert len(seated) == len(set(seated)) and set(seated) <= set(range(nodes))
        assert len(pairs) == nodes // 2  # at most one node sits a round out


@pytest.mark.parametrize("nodes", range(3, 20))
def test_one_slow_node_is_the_only_one_slow_in_every_round_it_plays(nodes):
    """A round is slow for both nodes of a pair with the slow node: the fastest round of every other
    node is with a node that is not it, so only the slow node's is slow."""
    rounds = link_rounds(nodes)
    for slow in range(nodes):
        fastest = {}
        for pairs in rounds:
            for a, b in pairs:
                for n in (a, b):
                    fastest[n] = min(fastest.get(n, 1.0), 1.0 if slow in (a, b) else 0.0)
        assert fastest == {n: float(n == slow) for n in range(nodes)}


def test_two_nodes_cannot_tell_whose_link_is_slow_so_they_have_no_rounds():
    assert link_rounds(2) == link_rounds(1) == []
    assert list(itertools.chain(*link_rounds(3))) == [(1, 2), (0, 2), (0, 1)]
