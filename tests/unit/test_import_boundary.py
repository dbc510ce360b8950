"""The operator never imports JAX or torch; the trainer never imports kopf, kubernetes or the
operator. Checked in fresh interpreters, importing every module of each package."""

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "longctx_operator": ("jax", "jaxlib", "torch", "flax", "optax", "orbax"),
    "longctx_trainer": ("kopf", "kubernetes", "longctx_operator"),
}
FOLDERS = {"longctx_operator": ROOT / "operator", "longctx_trainer": ROOT / "trainer"}


def modules(package: str) -> list[str]:
    found = [package]
    for info in pkgutil.walk_packages([str(FOLDERS[package])], prefix=package + "."):
        found.append(info.name)
    return sorted(found)


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_imports_nothing_from_the_other_side(package):
    code = (
        f"import importlib, json, sys\n"
        f"for name in {modules(package)!r}:\n"
        f"    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(sys.modules)))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT / "tests")
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.splitlines()[-1])
    leaked = sorted({name.split(".")[0] for name in loaded} & set(FORBIDDEN[package]))
    assert not leaked, f"{package} pulls in {leaked}"


def test_the_guard_sees_a_forbidden_import():
    """The check above can fail: importing the trainer's JAX code is seen as jax."""
    code = "import json, sys; import longctx_trainer.model; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    )
    assert "jax" in loaded
