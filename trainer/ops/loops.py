"""`scan` for loops whose body runs collectives: unrolled where XLA would let them overlap.

XLA:CPU orders collectives that share a communicator only by when each starts ("scheduling"
edges of its thunk executor): a collective that does not need a loop's result may start as soon
as the loop has started, while the loop's own collectives still run. Across processes those
collectives go over gloo, which tells concurrent operations on one communicator apart by nothing
(XLA sets no tag), so the ranks can pair different operations and abort ("Received data size
doesn't match expected size"), or mix up their data. It happens when a rank's threads are
starved (found by the straggler test, tests/integration/test_straggler_probe.py, with the machine
loaded). Unrolled, each collective is one synchronous thunk of the step and the ranks run them
one at a time, in the same order. On a GPU, collectives are ordered on their streams and loops
stay rolled (one compilation of the body, however many layers).
"""

from __future__ import annotations

import jax
from jax import lax


def collectives_overlap_in_loops() -> bool:
    """Whether this process's loops holding collectives must be unrolled: XLA:CPU over gloo."""
    return jax.process_count() > 1 and jax.default_backend() == "cpu"


def scan(body, init, xs):
    """`lax.scan(body, init, xs)` for a body that runs collectives (or may, under sharding)."""
    return lax.scan(body, init, xs, unroll=collectives_overlap_in_loops())
