"""In-place restart (longctx_trainer.inplace): the messages, the coordinator's decisions, a server
fed hostile lines, and real launchers restarting fake trainers inside their "pods"."""

import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from longctx_trainer.contract import podenv
from longctx_trainer.inplace import (
    MAX_LINE,
    TO_COORDINATOR,
    TO_LAUNCHER,
    BadMessage,
    Coordinator,
    Message,
    Server,
    decode,
    parse_address,
)
from longctx_trainer.launch import in_place_client
from support.ports import free_port


def test_messages_round_trip():
    for message in (Message("HELLO", (3,)), Message("FAILED", (1, 0, 1, 3)), Message("STOPPED", (1, 2))):
        assert decode(message.encode().rstrip(b"\n"), TO_COORDINATOR) == message
    for message in (Message("RESTART", (1, 5, 137)), Message("START", (1,)), Message("GIVEUP", (0,))):
        assert decode(message.encode().rstrip(b"\n"), TO_LAUNCHER) == message


@pytest.mark.parametrize(
    "line",
    [
        b"",
        b"HELLO",
        b"HELLO 1 2",
        b"HELLO -1",
        b"HELLO +1",
        b"HELLO 1.0",
        b"HELLO \xd9\xa1",  # an Arabic-Indic digit: isdigit() but not ASCII
        b"HELLO 99999999",
        b"FAILED 0 0 0",
        b"RESTART 1 0 3",  # a launcher's message on the coordinator's side
        b"hello 1",
        b"HELLO  1",
        b"HELLO " + b"1" * MAX_LINE,
    ],
)
def test_a_malformed_line_is_refused(line):
    with pytest.raises(BadMessage):
        decode(line, TO_COORDINATOR)


def test_parse_address():
    assert parse_address("job-g1-0.job.ns.svc.cluster.local.:8477") == ("job-g1-0.job.ns.svc.cluster.local.", 8477)
    for bad in ("host", ":8477", "host:", "host:x", "host:70000"):
        with pytest.raises(ValueError):
            parse_address(bad)


def _joined(pods=2, budget=2) -> Coordinator:
    coordinator = Coordinator(pods, budget)
    assert all(coordinator.hello(pod) for pod in range(pods))
    return coordinator


def test_a_failure_restarts_every_pod_once_all_have_stopped():
    c = _joined()
    assert c.failed(1, 0, 1, 3, now=0.0) == [Message("RESTART", (1, 1, 3))]
    # the survivor's trainer dies of the restart: an earlier epoch's failure is no new one
    assert c.failed(0, 0, 0, 1, now=1.0) == []
    assert c.stopped_trainers(0, 1) == []
    assert c.stopped_trainers(0, 1) == []  # said twice: still one pod
    assert c.stopped_trainers(1, 1) == [Message("START", (1,))]
    assert c.failed(0, 1, 0, 3, now=5.0) == [Message("RESTART", (2, 0, 3))]


def test_the_budget_bounds_the_restarts():
    c = _joined(budget=1)
    assert c.failed(1, 0, 1, 3, now=0.0)[0].kind == "RESTART"
    assert c.stopped_trainers(0, 1) == [] and c.stopped_trainers(1, 1)[0].kind == "START"
    assert c.failed(1, 1, 1, 3, now=9.0) == [Message("GIVEUP", (1,))]
    assert c.failed(0, 1, 0, 3, now=9.0) == [Message("GIVEUP", (1,))]  # given up for good
    assert _joined(budget=0).failed(0, 0, 0, 3, now=0.0) == [Message("GIVEUP", (0,))]


def test_no_agreement_without_every_launcher():
    c = Coordinator(pods=3, budget=3)
    assert c.hello(0) and c.hello(2)
    assert c.failed(0, 0, 0, 3, now=0.0) == [Message("GIVEUP", (0,))]


def test_hello_refuses_a_pod_out_of_range_or_taken():
    c = Coordinator(pods=2, budget=1)
    assert c.hello(1) and not c.hello(1) and not c.hello(2)


def test_a_launcher_lost_or_slow_while_restarting_gives_up():
    c = _joined()
    c.failed(1, 0, 1, 3, now=0.0)
    assert c.lost(1) == [Message("GIVEUP", (1,))]
    slow = _joined()
    slow.failed(1, 0, 1, 3, now=0.0)
    slow.stopped_trainers(0, 1)
    assert slow.tick(now=10.0, stop_seconds=60.0) == []
    assert slow.tick(now=61.0, stop_seconds=60.0) == [Message("GIVEUP", (1,))]
    assert slow.stopped_trainers(1, 1) == []  # too late


def test_a_launcher_leaving_while_running_is_no_restart_but_prevents_the_next():
    c = _joined()
    assert c.lost(0) == []
    assert c.failed(1, 0, 1, 3, now=0.0) == [Message("GIVEUP", (0,))]


def _server(pods=2, budget=1) -> tuple[Server, int, list[str]]:
    logs: list[str] = []
    port = free_port()
    server = Server(port, pods, budget, logs.append)
    server.start()
    return server, port, logs


def _connect(port: int) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.settimeout(10)
    return sock


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed the connection (reads end)."""
    try:
        return sock.recv(MAX_LINE) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize(
    "first",
    [
        b"x" * 10_000,  # no newline, ever longer
        b"HELLO 7\n",  # out of range
        b"FAILED 0 0 0 3\n",  # before HELLO
        b"\xff\xfe\n",
        b"HELLO 0\nFAILED 1 0 1 3\n",  # another pod's failure on pod 0's connection
    ],
)
def test_the_server_closes_a_hostile_connection_and_serves_on(first):
    server, port, logs = _server()
    hostile = _connect(port)
    hostile.sendall(first)
    assert _closed(hostile)
    assert server.coordinator.epoch == 0 and not server.coordinator.gave_up
    # the gang still agrees: both launchers join, one fails, both are told to restart
    pods = [_connect(port) for _ in range(2)]
    for pod, sock in enumerate(pods):
        sock.sendall(Message("HELLO", (pod,)).encode())
    for _ in range(1000):  # joins are asynchronous
        if len(server.coordinator.joined) == 2:
            break
        time.sleep(0.01)
    pods[1].sendall(Message("FAILED", (1, 0, 1, 3)).encode())
    assert [sock.recv(MAX_LINE) for sock in pods] == [b"RESTART 1 1 3\n"] * 2
    for sock in pods:
        sock.close()


# Real launchers, two "pods" on this host, each running a fake trainer: pod 1's fails in its first
# epoch while pod 0's blocks (as one blocked with a dead peer would); in epoch 1 both finish.
FAKE_TRAINER = """
import os, sys, time
epoch, pod = os.environ.get("LONGCTX_RESTART_EPOCH", "0"), os.environ["JOB_COMPLETION_INDEX"]
with open(os.path.join(sys.argv[1], "starts"), "a") as f:
    f.write(f"{pod} {epoch} {os.getppid()}\\n")
if epoch == "0":
    if pod == "1":
        time.sleep(0.5)
        sys.exit(3)
    time.sleep(120)
"""

LAUNCHER = """
import sys
import longctx_trainer.launch as launch
launch.TRAINER = [sys.executable, sys.argv[1]]
sys.exit(launch.main(sys.argv[2:]))
"""


def _gang(tmp_path, budget: int) -> list[subprocess.Popen]:
    (tmp_path / "fake.py").write_text(FAKE_TRAINER)
    (tmp_path / "launcher.py").write_text(LAUNCHER)
    port = free_port()
    env = {
        podenv.RESTART_ADDRESS: f"127.0.0.1:{port}",
        podenv.IN_PLACE_RESTARTS: str(budget),
        podenv.NUM_PROCESSES: "2",
        podenv.PROCESSES_PER_POD: "1",
    }
    return [
        subprocess.Popen(
            [sys.executable, str(tmp_path / "launcher.py"), str(tmp_path / "fake.py"), str(tmp_path)],
            env={"PATH": "/usr/bin:/bin", **env, podenv.COMPLETION_INDEX: str(pod), **_pythonpath()},
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its fake trainer with it: stopped as one
        )
        for pod in (0, 1)
    ]


def _pythonpath() -> dict:
    return {k: os.environ[k] for k in ("PYTHONPATH",) if k in os.environ}


def test_launchers_restart_their_trainers_in_place(tmp_path):
    launchers = _gang(tmp_path, budget=1)
    results = [(p.wait(timeout=120), p.stderr.read()) for p in launchers]
    assert [code for code, _ in results] == [0, 0], results
    starts = sorted(tuple(line.split()) for line in (tmp_path / "starts").read_text().splitlines())
    pids = [str(p.pid) for p in launchers]
    # each pod's trainer started twice, both times by the same launcher
    assert starts == sorted([("0", "0", pids[0]), ("0", "1", pids[0]), ("1", "0", pids[1]), ("1", "1", pids[1])])
    for _, err in results:
        assert "in-place restart 1: rank 1 failed with exit code 3" in err, err


def test_without_budget_the_failed_pod_fails_with_its_trainers_code(tmp_path):
    launchers = _gang(tmp_path, budget=0)
    assert launchers[1].wait(timeout=120) == 3
    os.killpg(launchers[0].pid, signal.SIGKILL)  # blocked as with a dead peer: the Job controller deletes it
    launchers[0].wait(timeout=30)
    assert "in-place restart" not in launchers[1].stderr.read()
    for p in launchers:
        p.stderr.close()


def test_in_place_is_off_without_an_address_or_a_budget():
    base = {podenv.COMPLETION_INDEX: "1", podenv.NUM_PROCESSES: "2"}
    assert in_place_client(base) is None
    assert in_place_client(base | {podenv.RESTART_ADDRESS: "h:1", podenv.IN_PLACE_RESTARTS: "0"}) is None
    assert in_place_client(base | {podenv.RESTART_ADDRESS: "nonsense", podenv.IN_PLACE_RESTARTS: "2"}) is None
