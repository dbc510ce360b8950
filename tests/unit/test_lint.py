"""ruff (configured in pyproject.toml) finds nothing to fix and nothing to reformat; shellcheck
(.shellcheckrc; the Debian package, which hack/test installs) finds nothing in the hack/ scripts."""

import shutil
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


def shell_scripts() -> list[Path]:
    """The bash scripts under hack/: those with a bash shebang, and the sourced *.sh files."""
    found = []
    for path in sorted((ROOT / "hack").rglob("*")):
        if path.is_file() and (path.suffix == ".sh" or path.read_bytes()[:64].split(b"\n")[0].endswith(b"bash")):
            found.append(path)
    return found


def shellcheck(*paths: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("shellcheck")
    assert binary, "shellcheck is not installed: hack/test installs it (Debian package shellcheck)"
    return subprocess.run([binary, "--format", "gcc", *map(str, paths)], cwd=ROOT, capture_output=True, text=True)


def test_shellcheck_is_clean():
    scripts = shell_scripts()
    assert ROOT / "hack" / "lib.sh" in scripts and ROOT / "hack" / "images" / "build" in scripts
    result = shellcheck(*scripts)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr


def test_shellcheck_sees_a_fragile_script(tmp_path):
    script = tmp_path / "bad"
    script.write_text('#!/usr/bin/env bash\nfor name in $(ls "$1"); do echo $name; done\n')
    result = shellcheck(script)
    assert result.returncode != 0 and "SC2045" in result.stdout
