"""In-place restart: the gang's launchers agree to restart their trainer processes inside the pods.

JAX cannot lose a process: when one rank's trainer fails, its peers are blocked in a collective
with it (or fail too). Without in-place restart the pod fails, the Job fails and the operator
replaces the whole gang (new pods). With it (spec.restartPolicy.inPlace), rank 0's launcher serves
a small restart coordinator (`Server`, at podenv.RESTART_ADDRESS) and every launcher, rank 0's
included, keeps one connection to it (`Client`). A launcher whose trainer fails reports it; the
coordinator tells every launcher to stop its trainers (RESTART with the next epoch), waits until
all have (STOPPED), and tells them to start again (START): the new trainers rendezvous anew (rank
0's hosts the JAX coordinator again) and resume from the last checkpoint. No old trainer is alive
anywhere when a new one starts, so a new one never meets the old JAX coordinator.

Anything not agreed ends in GIVEUP, or in no answer, and the launchers fall back to what they do
without in-place restart (the failed pod fails with the trainer's exit code, the operator restarts
the gang): a launcher not connected, the budget (podenv.IN_PLACE_RESTARTS, per generation) spent,
a launcher lost or not stopped in time while restarting.

Messages are one ASCII line each, at most MAX_LINE bytes: `HELLO pod`, `FAILED pod epoch rank
code`, `STOPPED pod epoch` (launcher to coordinator) and `RESTART epoch rank code`, `START epoch`,
`GIVEUP epoch` (coordinator to launchers). Pods are not trusted: a line too long, malformed, out
of range or naming another pod than its connection's closes that connection, and never stops the
coordinator. No JAX import: the launcher is PID 1 of every pod.
"""

from __future__ import annotations

import queue
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

MAX_LINE = 64
"""Bytes in one message, its newline included."""
MAX_NUMBER = 1_000_000
"""No pod index, epoch or exit code on the wire is this large."""
STOP_SECONDS = 60.0
"""How long the coordinator waits for every launcher to stop its trainers after a RESTART."""
ANSWER_SECONDS = 10.0
"""How long a launcher whose trainer failed waits for the coordinator's RESTART."""
START_SECONDS = STOP_SECONDS + 10.0
"""How long a launcher that stopped its trainers waits for START."""
HELLO_SECONDS = 10.0
"""A connection that has not said HELLO within this time is closed."""

ToCoordinator = Literal["HELLO", "FAILED", "STOPPED"]
ToLauncher = Literal["RESTART", "START", "GIVEUP"]
_ARITY = {"HELLO": 1, "FAILED": 4, "STOPPED": 2, "RESTART": 3, "START": 1, "GIVEUP": 1}


class BadMessage(ValueError):
    """A line that is not a message of the protocol."""


@dataclass(frozen=True)
class Message:
    kind: str
    args: tuple[int, ...] = ()

    def encode(self) -> bytes:
        line = " ".join([self.kind, *map(str, self.args)]).encode("ascii") + b"\n"
        if len(line) > MAX_LINE:
            raise BadMessage(f"message too long: {line!r}")
        return line


def decode(line: bytes, kinds: frozenset[str]) -> Message:
    """The message in one line (its newline stripped), one of `kinds`; raises BadMessage."""
    if len(line) >= MAX_LINE:
        raise BadMessage("line too long")
    try:
        words = line.decode("ascii").split(" ")
    except UnicodeDecodeError:
        raise BadMessage("not ASCII") from None
    kind, args = words[0], words[1:]
    if kind not in kinds or len(args) != _ARITY[kind]:
        raise BadMessage(f"unknown message {line[:MAX_LINE]!r}")
    numbers = []
    for arg in args:  # plain decimal digits: no sign, space, underscore or non-ASCII digit
        if not arg.isascii() or not arg.isdigit() or len(arg) > 7 or int(arg) >= MAX_NUMBER:
            raise BadMessage(f"bad number in {line[:MAX_LINE]!r}")
        numbers.append(int(arg))
    return Message(kind, tuple(numbers))


TO_COORDINATOR = frozenset({"HELLO", "FAILED", "STOPPED"})
TO_LAUNCHER = frozenset({"RESTART", "START", "GIVEUP"})


class LineReader:
    """Reads bounded lines from a socket: a line longer than MAX_LINE raises BadMessage."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buffer = sock, b""

    def readline(self) -> bytes | None:
        """The next line without its newline; None at the end of the stream."""
        while b"\n" not in self.buffer:
            if len(self.buffer) >= MAX_LINE:
                raise BadMessage("line too long")
            chunk = self.sock.recv(MAX_LINE)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        if len(line) >= MAX_LINE:
            raise BadMessage("line too long")
        return line


@dataclass
class Coordinator:
    """The gang's agreement, pure: each event in, the messages to send out (to every launcher).

    `epoch` is the number of in-place restarts ordered so far; a launcher's FAILED or STOPPED names
    the epoch its trainers ran in, and one of an earlier epoch (its trainer died of the restart
    already ordered) is ignored."""

    pods: int
    budget: int
    epoch: int = 0
    joined: set[int] = field(default_factory=set)
    stopping_since: float | None = None
    stopped: set[int] = field(default_factory=set)
    gave_up: bool = False

    def hello(self, pod: int) -> bool:
        """A launcher joins; False (close the connection) if its pod is out of range or joined."""
        if not 0 <= pod < self.pods or pod in self.joined:
            return False
        self.joined.add(pod)
        return True

    def failed(self, pod: int, epoch: int, rank: int, code: int, now: float) -> list[Message]:
        """Pod `pod`'s trainer process `rank` (its JAX process id) exited with `code` in `epoch`."""
        if self.gave_up:
            return [Message("GIVEUP", (self.epoch,))]
        if epoch != self.epoch or self.stopping_since is not None:
            return []  # an earlier epoch's trainer, dying of the restart already ordered
        if self.epoch >= self.budget or len(self.joined) < self.pods:
            return self._give_up()
        self.epoch += 1
        self.stopping_since, self.stopped = now, set()
        return [Message("RESTART", (self.epoch, rank, code))]

    def stopped_trainers(self, pod: int, epoch: int) -> list[Message]:
        if self.gave_up or self.stopping_since is None or epoch != self.epoch:
            return []
        self.stopped.add(pod)
        if len(self.stopped) < self.pods:
            return []
        self.stopping_since = None
        return [Message("START", (self.epoch,))]

    def lost(self, pod: int) -> list[Message]:
        """A launcher's connection ended (its pod is gone, or it exited)."""
        self.joined.discard(pod)
        if self.stopping_since is not None and not self.gave_up:
            return self._give_up()
        return []

    def tick(self, now: float, stop_seconds: float = STOP_SECONDS) -> list[Message]:
        if self.stopping_since is not None and not self.gave_up and now - self.stopping_since > stop_seconds:
            return self._give_up()
        return []

    def _give_up(self) -> list[Message]:
        self.gave_up = True
        return [Message("GIVEUP", (self.epoch,))]


class Server:
    """The coordinator on rank 0's launcher: one thread per connection, at most `pods` + SPARE."""

    SPARE = 4

    def __init__(self, port: int, pods: int, budget: int, log: Callable[[str], None]):
        self.coordinator = Coordinator(pods, budget)
        self.log = log
        self.lock = threading.Lock()
        self.connections: dict[int, socket.socket] = {}
        self.open = 0
        self.listener = socket.create_server(("", port))  # SO_REUSEADDR: a restarted pod rebinds at once

    def start(self) -> None:
        threading.Thread(target=self._accept, daemon=True, name="inplace-accept").start()
        threading.Thread(target=self._tick, daemon=True, name="inplace-tick").start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.lock:
                full = self.open >= self.coordinator.pods + self.SPARE
                self.open += 0 if full else 1
            if full:
                sock.close()
                continue
            threading.Thread(target=self._serve, args=(sock,), daemon=True, name="inplace-conn").start()

    def _tick(self) -> None:
        while True:
            time.sleep(0.5)
            with self.lock:
                self._send(self.coordinator.tick(time.monotonic()))

    def _send(self, messages: list[Message]) -> None:
        """To every joined launcher (call with the lock held); a launcher that cannot take it is dropped."""
        for message in messages:
            self.log(f"in-place restart coordinator: {message.kind} {' '.join(map(str, message.args))}")
            for pod, sock in list(self.connections.items()):
                try:
                    sock.sendall(message.encode())
                except OSError:
                    sock.close()
                    del self.connections[pod]

    def _serve(self, sock: socket.socket) -> None:
        pod: int | None = None
        try:
            sock.settimeout(HELLO_SECONDS)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            reader = LineReader(sock)
            hello = reader.readline()
            if hello is None:
                return
            message = decode(hello, TO_COORDINATOR)
            with self.lock:
                if message.kind != "HELLO" or not self.coordinator.hello(message.args[0]):
                    return
                pod = message.args[0]
                self.connections[pod] = sock
            sock_reader_timeout(sock)
            while (line := reader.readline()) is not None:
                message = decode(line, TO_COORDINATOR)
                if message.kind == "HELLO" or message.args[0] != pod:
                    raise BadMessage(f"{message.kind} names pod {message.args[0]} on pod {pod}'s connection")
                with self.lock:
                    if message.kind == "FAILED":
                        self._send(self.coordinator.failed(pod, *message.args[1:], now=time.monotonic()))
                    else:
                        self._send(self.coordinator.stopped_trainers(pod, message.args[1]))
        except (OSError, BadMessage) as error:
            self.log(f"in-place restart coordinator: closing a connection (pod {pod}): {error}")
        finally:
            with self.lock:
                self.open -= 1
                if pod is not None and self.connections.get(pod) is sock:
                    del self.connections[pod]
                    self._send(self.coordinator.lost(pod))
            sock.close()


def sock_reader_timeout(sock: socket.socket, send_seconds: int = 5) -> None:
    """Reads wait as long as the launcher lives; only writes are bounded (SO_SNDTIMEO)."""
    sock.settimeout(None)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", send_seconds, 0))


class Client:
    """A launcher's connection to the coordinator: connects in the background (rank 0's launcher
    may start later), says HELLO, and queues what the coordinator sends. Once lost it stays lost:
    a failure then falls back."""

    def __init__(self, host: str, port: int, pod: int, log: Callable[[str], None]):
        self.host, self.port, self.pod, self.log = host, port, pod, log
        self.messages: queue.Queue[Message | None] = queue.Queue()
        self.sock: socket.socket | None = None
        self.connected = threading.Event()
        self.lost = threading.Event()

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name="inplace-client").start()

    def _run(self) -> None:
        delay = 0.2
        while True:
            try:
                sock = socket.create_connection((self.host, self.port), timeout=5.0)
                break
            except OSError:
                time.sleep(delay)
                delay = min(2 * delay, 2.0)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock_reader_timeout(sock)
            sock.sendall(Message("HELLO", (self.pod,)).encode())
            self.sock = sock
            self.connected.set()
            reader = LineReader(sock)
            while (line := reader.readline()) is not None:
                self.messages.put(decode(line, TO_LAUNCHER))
        except (OSError, BadMessage) as error:
            self.log(f"in-place restart: connection to the coordinator ended: {error}")
        self.lost.set()
        self.messages.put(None)
        sock.close()

    @property
    def usable(self) -> bool:
        return self.connected.is_set() and not self.lost.is_set()

    def send(self, message: Message) -> bool:
        if not self.usable or self.sock is None:
            return False
        try:
            self.sock.sendall(message.encode())
            return True
        except OSError:
            return False

    def pending(self) -> bool:
        return not self.messages.empty()

    def next(self, timeout: float | None) -> Message | None:
        """The next message, or None when the connection is lost or `timeout` passes."""
        try:
            return self.messages.get(timeout=timeout) if timeout != 0 else self.messages.get_nowait()
        except queue.Empty:
            return None


def parse_address(address: str) -> tuple[str, int]:
    """`host:port` -> (host, port); raises ValueError."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"not host:port: {address!r}")
    return host, int(port)


def log(text: str) -> None:
    print(f"longctx_trainer.launch: {text}", file=sys.stderr, flush=True)
