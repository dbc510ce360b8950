"""The progress metrics in rank 0's Prometheus exposition, and the health metrics in every rank's
(contract/health.py): a bounded, linear scanner, read by the operator and by the in-pod launcher
(trainer/stopwatch.py).

The text comes from whatever the job's image serves on `metrics.port`, so it is read as hostile
input. A general parser (prometheus_client's) spends time growing with the square of some lines
(a `#` line of spaces, a label value of escaped quotes: 42 s for one body under the 1 MiB cap).
This scanner reads only the samples of the names the progress contract uses: one regular
expression pass over the body finds the lines that start with one of them (every other line,
comments included, is skipped without being looked at again), lines longer than
MAX_LINE_BYTES are skipped, and more than MAX_SAMPLES such lines make the body unreadable. The work
in Python is therefore bounded by MAX_SAMPLES lines of at most MAX_LINE_BYTES, whatever the body
holds; the rest is one linear pass of the regular expression engine.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from .health import HEALTH_METRICS, PHASE, PHASES
from .metrics import (
    IN_PLACE_RESTARTS,
    LAST_CHECKPOINT,
    LAST_CHECKPOINT_TIME,
    LOSS,
    MFU,
    MFU_CONVENTION,
    MFU_PEAK,
    RESUMED_FROM,
    STEP,
    TOKENS_PER_SECOND,
)

PROGRESS_METRICS = (
    STEP,
    TOKENS_PER_SECOND,
    LOSS,
    MFU,
    LAST_CHECKPOINT,
    LAST_CHECKPOINT_TIME,
    RESUMED_FROM,
    IN_PLACE_RESTARTS,
)

MAX_BODY_BYTES = 1 * 2**20
"""A trainer's exposition is a few kilobytes; anything past this is not read."""
MAX_LINE_BYTES = 4096
"""A sample line of the contract is about 150 bytes; longer lines are skipped."""
MAX_SAMPLES = 1000
"""Samples of the progress and health metrics read from one body (the trainer exports about twenty)."""


class MetricsUnreadable(Exception):
    """Rank 0's metrics could not be read; the message never contains the response body."""


# A line that starts with a progress metric's name followed by its labels or a blank. `[^\n]*`
# has nothing after it to backtrack for, so each line start costs at most one pass over its line.
_NAMES = b"|".join(re.escape(n.encode()) for n in PROGRESS_METRICS + HEALTH_METRICS)
_SAMPLE = re.compile(rb"^(" + _NAMES + rb")(?=[{ \t])([^\n]*)", re.MULTILINE)
# One label: the value's two alternatives start with different bytes, so a failed match backtracks
# once per character, never more.
_LABEL = re.compile(rb'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,?)[ \t]*')
_VALUE = re.compile(rb"[ \t]+([^ \t\r\n]{1,64})(?:[ \t]+[^ \t\r\n]{1,64})?[ \t]*\r?")  # value [timestamp]
_NUMBER = re.compile(rb"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|Inf|inf)|NaN|nan")


def _labels(line: bytes) -> tuple[dict[bytes, bytes], int]:
    """The labels of `line`, which starts with `{`, raw (escapes left as they are: the values the
    scanner compares with, `0`, `causal`, `bf16`, hold none), and where the value part starts."""
    labels: dict[bytes, bytes] = {}
    pos = 1
    while True:
        if line.startswith(b"}", pos):
            return labels, pos + 1
        match = _LABEL.match(line, pos)
        if match is None:
            raise ValueError
        labels[match[1]] = match[2]
        pos = match.end()
        if not match[3] and not line.startswith(b"}", pos):
            raise ValueError


def _samples(body: bytes) -> Iterator[tuple[str, dict[bytes, bytes], float]]:
    """(name, raw labels, value) of each sample of a progress or health metric, in order. Raises
    MetricsUnreadable (naming the metric, never quoting the body) for a malformed sample or more
    than MAX_SAMPLES of them."""
    for count, sample in enumerate(_SAMPLE.finditer(body)):
        if count == MAX_SAMPLES:
            raise MetricsUnreadable(f"more than {MAX_SAMPLES} samples of the progress and health metrics")
        if sample.end() - sample.start() > MAX_LINE_BYTES:
            continue
        name, line = sample[1].decode(), sample[2]
        try:
            labels, pos = _labels(line) if line.startswith(b"{") else ({}, 0)
            value = _VALUE.fullmatch(line, pos)
            if value is None or not _NUMBER.fullmatch(value[1]):
                raise ValueError
        except ValueError:
            raise MetricsUnreadable(f"malformed {name} sample") from None
        yield name, labels, float(value[1])


def rank0_values(body: bytes) -> dict[str, float]:
    """Metric name -> value of rank 0's samples of the progress metrics (those labelled rank="0"
    or with no rank label); MFU only in the causal convention against the bf16 peak. A later
    sample of the same name wins. Raises MetricsUnreadable as _samples does."""
    values: dict[str, float] = {}
    for name, labels, value in _samples(body):
        if name not in PROGRESS_METRICS or labels.get(b"rank", b"0") != b"0":
            continue
        if name == MFU and (
            labels.get(b"convention") != MFU_CONVENTION.encode()
            or labels.get(b"peak", MFU_PEAK.encode()) != MFU_PEAK.encode()
        ):
            continue
        values[name] = value
    return values


_PHASE_LABELS = {phase.encode(): phase for phase in PHASES}


def health_values(body: bytes) -> dict[str, float | str]:
    """Metric name -> value of the health metrics in one process's exposition (an endpoint serves
    one process: its rank is known from where it was read), and PHASE -> the phase whose gauge is
    1 (a phase the contract does not name is ignored). A later sample wins. Raises
    MetricsUnreadable as _samples does."""
    values: dict[str, float | str] = {}
    for name, labels, value in _samples(body):
        if name == PHASE:
            if value == 1 and (phase := _PHASE_LABELS.get(labels.get(b"phase", b""))) is not None:
                values[PHASE] = phase
        elif name in HEALTH_METRICS:
            values[name] = value
    return values
