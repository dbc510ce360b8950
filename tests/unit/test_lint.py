"""ruff (configured in pyproject.toml) finds nothing to fix and nothing to reformat."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUFF = [sys.executable, "-m", "ruff"]


def test_ruff_check_is_clean():
    result = subprocess.run([*RUFF, "check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr


def test_ruff_format_is_clean():
    result = subprocess.run([*RUFF, "format", "--check", "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr
