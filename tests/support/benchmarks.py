"""The benchmark scripts as modules, for the tests of their logic: benchmarks/ is no package and
its scripts import each other by bare name, so the folder goes on sys.path (once, first)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def benchmark(name: str) -> ModuleType:
    """benchmarks/<name>.py, imported."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    return importlib.import_module(name)
