"""The in-pod launcher: per-process identity, fail-fast supervision and, after a SIGTERM, the kill of
a process that cannot stop (real child processes)."""

import signal
import subprocess
import sys
import time

import yaml
from prometheus_client import generate_latest

from longctx_trainer.contract.health import HEARTBEAT
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.contract.processes import first_failure
from longctx_trainer.launch import process_env, supervise
from longctx_trainer.stopwatch import Health, StopWatch, parse_health, read_health
from support.ports import free_port
from support.tiny import tiny_trainer_config


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


# After a SIGTERM: the watch for a process that cannot stop well (longctx_trainer.stopwatch).

FAKE_TRAINER = """
import signal, sys, time
from longctx_trainer.contract.config import load_config
from longctx_trainer.contract.metrics import TrainMetrics
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # as JAX's preemption handler takes it
metrics = TrainMetrics("fake", 0)
metrics.serve(load_config(sys.argv[sys.argv.index("--config") + 1]).metrics.port)
metrics.enter("training")
behaviour = sys.argv[-1]
if behaviour == "blocked":  # in a collective with a dead peer
    time.sleep(120)
elif behaviour == "stepping":  # finishing steps, then saving, then exiting
    for step in range(1, 16):
        time.sleep(0.2)
        metrics.observe_step(step, 1, 0.2, 1.0, {})
    metrics.checkpoint(15, lambda: time.sleep(3))
"""

LAUNCHER = """
import functools, sys
import longctx_trainer.launch as launch
from longctx_trainer.stopwatch import StopWatch
launch.TRAINER = [sys.executable, sys.argv[1]]
launch.StopWatch = functools.partial(StopWatch, floor=1.0)
sys.exit(launch.main(sys.argv[2:]))
"""


def _metrics_page(phase: str, steps: int, step_seconds: float) -> tuple[bytes, float]:
    """A real TrainMetrics page after `steps` steps, now in `phase`, and the heartbeat it holds."""
    metrics = TrainMetrics("job", 3)
    metrics.enter("training")
    for step in range(1, steps + 1):
        metrics.observe_step(step, 10, step_seconds, 2.0, {})
    metrics.enter(phase)
    heartbeat = metrics.registry.get_sample_value(HEARTBEAT, {"job_name": "job", "rank": "3"})
    return generate_latest(metrics.registry), heartbeat


def test_the_health_read_from_a_trainers_metrics_page():
    page, heartbeat = _metrics_page("training", 2, 0.5)
    assert parse_health(page) == Health("training", heartbeat, 0.5)
    page, heartbeat = _metrics_page("checkpointing", 0, 0.5)
    assert parse_health(page) == Health("checkpointing", heartbeat, None)
    assert parse_health(b"") == Health(None, None, None)


def test_a_process_is_stuck_after_its_bound_without_a_heartbeat():
    watch = StopWatch(since=100.0, floor=30.0, steps=3)
    quiet = Health("training", heartbeat=50.0, step_seconds=2.0)
    assert not watch.stuck(quiet, 100.0)  # the first read starts the quiet time
    assert not watch.stuck(quiet, 129.0)
    assert watch.stuck(quiet, 131.0)  # 30 s floor: 3 x 2 s steps is less
    slow = StopWatch(since=100.0, floor=30.0, steps=3)
    assert not slow.stuck(Health("training", 50.0, 20.0), 100.0)
    assert not slow.stuck(Health("training", 50.0, 20.0), 159.0)  # 3 x 20 s steps
    assert slow.stuck(Health("training", 50.0, 20.0), 161.0)


def test_a_heartbeat_or_a_checkpoint_write_is_progress_and_an_unread_page_is_no_evidence():
    watch = StopWatch(since=0.0, floor=10.0, steps=3)
    assert not watch.stuck(Health("training", 1.0, 1.0), 0.0)
    assert not watch.stuck(Health("training", 2.0, 1.0), 9.0)  # a step finished at 9 s
    assert not watch.stuck(Health("training", 2.0, 1.0), 18.0)
    assert watch.stuck(Health("training", 2.0, 1.0), 20.0)
    saving = StopWatch(since=0.0, floor=10.0, steps=3)
    assert not any(saving.stuck(Health("checkpointing", 1.0, 1.0), t) for t in (0.0, 50.0, 500.0))
    unread = StopWatch(since=0.0, floor=10.0, steps=3)
    assert not any(unread.stuck(h, 500.0) for h in (None, Health(None, None, None)))


def _launch(tmp_path, behaviour: str) -> subprocess.Popen:
    fake, launcher, config = tmp_path / "fake.py", tmp_path / "launcher.py", tmp_path / "config.yaml"
    fake.write_text(FAKE_TRAINER)
    launcher.write_text(LAUNCHER)
    config.write_text(
        yaml.safe_dump(
            tiny_trainer_config(steps=10, global_batch_tokens=64, metrics={"port": free_port()}).model_dump(mode="json")
        )
    )
    return subprocess.Popen([sys.executable, str(launcher), str(fake), "--config", str(config), behaviour])


def _when_serving(launcher: subprocess.Popen, tmp_path) -> None:
    port = yaml.safe_load((tmp_path / "config.yaml").read_text())["metrics"]["port"]
    deadline = time.monotonic() + 60
    while read_health(port) is None and launcher.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert read_health(port) is not None, "the fake trainer never served its metrics"


def test_the_launcher_kills_a_trainer_that_cannot_stop_after_a_sigterm(tmp_path):
    """A real launcher (floor 1 s) and a fake trainer that ignores SIGTERM and never moves."""
    launcher = _launch(tmp_path, "blocked")
    _when_serving(launcher, tmp_path)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=60) == 128 + signal.SIGKILL


def test_the_launcher_waits_for_a_trainer_that_steps_and_saves_after_a_sigterm(tmp_path):
    """Steps of 0.2 s, then a 3 s save (longer than the 1 s floor): it ends on its own, 0."""
    launcher = _launch(tmp_path, "stepping")
    _when_serving(launcher, tmp_path)
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(timeout=60) == 0
