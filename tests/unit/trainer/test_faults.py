"""trainer/faults.py: the rank that never joins the rendezvous, for the end-to-end tests, in a real
process: it answers its first read in the rendezvous phase, stops (SIGSTOP) at its second, and a
rank the env does not name goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from longctx_trainer.contract.health import PHASE
from longctx_trainer.contract.podenv import FAULT_FREEZE_IN_RENDEZVOUS
from support.ports import free_port

CHILD = """
import sys
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.faults import freeze_in_rendezvous
metrics = TrainMetrics("job", int(sys.argv[2]))
metrics.serve(int(sys.argv[1]))
metrics.enter("rendezvous")
print("serving", flush=True)
freeze_in_rendezvous(metrics, int(sys.argv[2]))
print("joined", flush=True)
"""


def state(pid: int) -> str:
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]


def start(rank: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(port), str(rank)],
        env=os.environ | {FAULT_FREEZE_IN_RENDEZVOUS: "1"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout.readline() == "serving\n"
    return child, port


def read(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_the_named_rank_answers_in_the_rendezvous_then_stops_at_its_second_read():
    child, port = start(1)
    try:
        assert f'{PHASE}{{job_name="job",phase="rendezvous",rank="1"}} 1.0' in read(port)
        time.sleep(0.5)
        assert state(child.pid) != "T"  # one read: still running, not joined
        try:
            read(port)
        except OSError:
            pass  # the answer may never come: the process stopped while writing it
        deadline = time.monotonic() + 10
        while state(child.pid) != "T" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert state(child.pid) == "T", "the named rank did not stop"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()


def test_a_rank_the_env_does_not_name_goes_on():
    child, _ = start(0)
    try:
        assert child.stdout.readline() == "joined\n"
    finally:
        child.kill()
        child.wait()
