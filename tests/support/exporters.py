"""A stand-in for a trainer's exporter in the operator's tests: the real TrainMetrics, served on a
port, finishing a step every 0.2 s by itself. Each step is 4,096 tokens in 0.5 s (8,192 tokens/s),
MFU 0.25 (causal) and 0.3 (full) against bf16, loss 10 / step; every 5th step also checkpoints."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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


def start_stepping_exporter(job: str, port: int) -> subprocess.Popen:
    """The exporter of rank 0 of `job` on `port` (stop it when done)."""
    return subprocess.Popen([sys.executable, "-c", STEPPING, job, str(port)])
