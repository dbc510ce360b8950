"""Every test module of the slower tiers imports: a renamed helper fails the unit tier at once,
not an hour into CI when the integration and e2e tiers are collected."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_integration_and_e2e_modules_import():
    collect = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "tests/integration",
            "tests/e2e",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert collect.returncode == 0, collect.stdout[-4000:] + collect.stderr[-2000:]
