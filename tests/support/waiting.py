"""One poll loop for the tests and the benchmarks (which cannot import a conftest)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(check: Callable[[], T], timeout: float = 60, interval: float = 0.5, what: str = "condition") -> T:
    """Calls `check` until it returns a truthy value, which is returned; TimeoutError, naming `what`
    and the last value, once `timeout` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what} (last value: {result!r})")
        time.sleep(interval)
