"""Stopping the processes tests start (an operator, a Prometheus): SIGTERM, then SIGKILL."""

import subprocess


def stop(proc: subprocess.Popen, timeout: float) -> None:
    """Terminates `proc` if it still runs, and kills it when it has not exited `timeout` seconds later."""
    if proc.poll() is None:
        proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
