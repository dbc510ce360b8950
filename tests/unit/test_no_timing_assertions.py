"""Tests assert behaviour, never how long something took (benchmarks/ measure time): no assert in
tests/ reads the clock, directly or through a variable computed from it. Clocks may still bound a
wait (a deadline in a loop condition), which is not an assertion."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLOCKS = {"monotonic", "time", "perf_counter", "monotonic_ns", "perf_counter_ns", "time_ns"}


def _is_clock(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def _clock_value(node: ast.AST, clocked: set[str]) -> bool:
    """A clock reading, a name holding one, or arithmetic on them (a duration): not a call that
    merely takes the time as an argument."""
    if _is_clock(node) or (isinstance(node, ast.Name) and node.id in clocked):
        return True
    if isinstance(node, ast.BinOp):
        return _clock_value(node.left, clocked) or _clock_value(node.right, clocked)
    if isinstance(node, ast.UnaryOp):
        return _clock_value(node.operand, clocked)
    return False


def timing_assertions(source: str) -> list[int]:
    """Line numbers of asserts that compare a clock reading or a duration computed from one."""
    tree = ast.parse(source)
    clocked: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and _clock_value(node.value, clocked):
            clocked |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assert) and any(
            _clock_value(n, clocked) for n in ast.walk(node.test) if isinstance(n, (ast.Call, ast.Name, ast.BinOp))
        ):
            found.append(node.lineno)
    return found


def test_no_test_asserts_on_wall_clock_time():
    offenders = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if (lines := timing_assertions(path.read_text()))
    }
    assert not offenders, offenders


def test_the_scan_finds_a_timing_assertion():
    source = (
        "import time\nstart = time.monotonic()\nrun()\nassert time.monotonic() - start < 30\n"
        "took = time.perf_counter() - start\nassert took < 5\nassert deadline > 0\n"
    )
    assert timing_assertions(source) == [4, 6]
