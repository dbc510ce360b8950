"""Free TCP ports on the loopback interface, for the servers and processes tests start."""

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def consecutive_free_ports(count: int) -> int:
    """A port P with P .. P+count-1 free on loopback, for a run whose workers listen on
    metrics.port + i (`longctx run` moves to other ports when any of them is taken)."""
    for _ in range(50):
        first = free_port()
        sockets = []
        try:
            for port in range(first, first + count):
                s = socket.socket()
                sockets.append(s)
                s.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for s in sockets:
                s.close()
    raise RuntimeError(f"no {count} consecutive free ports")
