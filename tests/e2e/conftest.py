"""The kind cluster of the e2e tests (hack/e2e-kind, docs/e2e.md).

`kind_kubeconfig` (session): $LONGCTX_E2E_KUBECONFIG when `hack/e2e-kind test` already brought the
cluster up; otherwise `hack/e2e-kind up` here (deleted again at the end unless LONGCTX_E2E_KEEP=1).
Where kind or a container engine with a reachable daemon is missing, the tests are skipped with
the reason `hack/e2e-kind check` gives, for what cannot run here (the suite's other skip is
tests/e2e/test_images.py's, where buildah cannot run).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "e2e-kind"


@pytest.fixture(scope="session")
def kind_kubeconfig() -> Iterator[Path]:
    if os.environ.get("LONGCTX_E2E_KUBECONFIG"):
        yield Path(os.environ["LONGCTX_E2E_KUBECONFIG"])
        return
    check = subprocess.run([str(SCRIPT), "check"], capture_output=True, text=True)
    if check.returncode == 3:
        pytest.skip(f"kind e2e cannot run here: {check.stderr.strip()}")
    assert check.returncode == 0, check.stderr
    up = subprocess.run([str(SCRIPT), "up"], stdout=subprocess.PIPE, text=True)
    try:
        assert up.returncode == 0, "hack/e2e-kind up failed (its output is above)"
        yield Path(up.stdout.strip().splitlines()[-1])
    finally:
        if os.environ.get("LONGCTX_E2E_KEEP") != "1":
            subprocess.run([str(SCRIPT), "down"], check=False)
