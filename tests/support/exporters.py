"""A stand-in for a trainer's exporter in the operator's tests: the real TrainMetrics, served on a
port, finishing a step every 0.2 s by itself. Each step is 4,096 tokens in 0.5 s (8,192 tokens/s),
MFU 0.25 (causal) and 0.3 (full) against bf16, loss 10 / step; every 5th step also checkpoints."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager

from support.operator_harness import wait_ready
from support.ports import free_port
from support.processes import stop

STEPPING = textwrap.dedent("""
    import sys, time
    from longctx_trainer.contract.metrics import TrainMetrics
    m = TrainMetrics(sys.argv[1], 0)
    m.serve(int(sys.argv[2]))
    step = 0
    while True:
        step += 1
        mfu = {("causal", "bf16"): 0.25, ("full", "bf16"): 0.3}
        m.observe_step(step, tokens=4096, seconds=0.5, loss=10.0 / step, mfu=mfu)
        if step % 5 == 0:
            m.observe_checkpoint(step, 0.01)
        time.sleep(0.2)
""")


@contextmanager
def stepping_exporter(job: str) -> Iterator[str]:
    """The exporter of rank 0 of `job` on a free port: yields its metrics URL once it answers, and
    stops it afterwards."""
    port = free_port()
    exporter = subprocess.Popen([sys.executable, "-c", STEPPING, job, str(port)])
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        wait_ready(url, server=exporter)
        yield url
    finally:
        stop(exporter, timeout=10)
