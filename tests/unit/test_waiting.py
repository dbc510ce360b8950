"""tests/support/waiting.py: the one poll loop of the tests and benchmarks."""

from __future__ import annotations

import itertools

import pytest

from support.waiting import poll_until


def test_returns_the_first_truthy_value():
    values = iter([0, None, "", "ready", "later"])
    assert poll_until(lambda: next(values), timeout=10, interval=0) == "ready"


def test_a_timeout_names_what_it_waited_for_and_the_last_value():
    calls = itertools.count(1)
    with pytest.raises(TimeoutError, match=r"waiting for the pods to go \(last value: \[\]\)"):
        poll_until(lambda: next(calls) and [], timeout=0, interval=0, what="the pods to go")
