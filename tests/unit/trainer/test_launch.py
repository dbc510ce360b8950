"""The in-pod launcher: per-process identity and fail-fast supervision (real child processes)."""

import subprocess
import sys

from longctx_trainer.launch import first_failure, process_env, supervise


def test_process_identity_from_completion_index_and_local_number():
    environ = {
        "LONGCTX_PROCESSES_PER_POD": "4",
        "JOB_COMPLETION_INDEX": "2",
        "LONGCTX_DEVICES_PER_PROCESS": "2",
        "JAX_NUM_PROCESSES": "16",
    }
    envs = [process_env(environ, local) for local in range(4)]
    assert [e["JAX_PROCESS_ID"] for e in envs] == ["8", "9", "10", "11"]
    assert [e["JAX_LOCAL_DEVICE_IDS"] for e in envs] == ["0,1", "2,3", "4,5", "6,7"]
    assert [e["LONGCTX_LOCAL_PROCESS_ID"] for e in envs] == ["0", "1", "2", "3"]
    assert all(e["JAX_NUM_PROCESSES"] == "16" for e in envs)


def _python(code):
    return subprocess.Popen([sys.executable, "-c", code])


def test_supervise_returns_zero_when_all_succeed():
    assert supervise([_python("pass"), _python("import time; time.sleep(0.3)")]) == 0


def test_supervise_stops_the_gang_when_one_fails():
    sleeper = _python("import time; time.sleep(60)")
    code = supervise([sleeper, _python("raise SystemExit(7)")])
    assert code == 7
    assert sleeper.poll() is not None and sleeper.returncode < 0  # stopped by a signal, not finished


def test_first_failure_names_the_failing_process():
    assert first_failure([_python("pass"), _python("raise SystemExit(3)")]) == (1, 3)
    assert first_failure([_python("pass")]) is None


def test_local_process_ids_add_to_a_pod_base():
    """`longctx run` runs several pods on one host: their processes need distinct metrics ports."""
    environ = {"LONGCTX_PROCESSES_PER_POD": "2", "JOB_COMPLETION_INDEX": "1", "LONGCTX_LOCAL_PROCESS_ID": "2"}
    assert [process_env(environ, local)["LONGCTX_LOCAL_PROCESS_ID"] for local in (0, 1)] == ["2", "3"]
