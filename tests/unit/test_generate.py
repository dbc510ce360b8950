"""hack/generate refreshes every generated artefact; --check finds none stale on a clean tree and
names a stale copy."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generate_check_names_a_stale_copy(tmp_path):
    tree = tmp_path / "repo"
    shutil.copytree(
        ROOT,
        tree,
        ignore=shutil.ignore_patterns(
            ".git", ".venv", ".cluster", ".runs", "*.egg-info", "__pycache__", ".hypothesis", ".pytest_cache"
        ),
    )
    # The test's own interpreter: hack/venv in the copy would reinstall the shared editable package
    # from the copy (a temporary folder) whenever the venv's stamp is stale.
    env = os.environ | {"LONGCTX_PYTHON": sys.executable}
    check = subprocess.run([str(tree / "hack" / "generate"), "--check"], capture_output=True, text=True, env=env)
    assert check.returncode == 0, check.stderr
    with (tree / "charts" / "longctx" / "files" / "longctx.rules.yaml").open("a") as rules:
        rules.write("# edited by hand\n")
    check = subprocess.run([str(tree / "hack" / "generate"), "--check"], capture_output=True, text=True, env=env)
    assert check.returncode == 1 and "stale: charts/longctx/files/longctx.rules.yaml" in check.stderr
    subprocess.run([str(tree / "hack" / "generate")], check=True, capture_output=True, env=env)
    assert subprocess.run([str(tree / "hack" / "generate"), "--check"], env=env).returncode == 0
