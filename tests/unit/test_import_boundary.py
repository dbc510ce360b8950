"""The operator never imports JAX or torch; the JAX trainer never imports kopf, kubernetes, the
operator or torch; the PyTorch example trainer (longctx_trainer.pytorch) never imports JAX, kopf,
kubernetes or the operator; the contract both trainers and the operator share
(longctx_trainer.contract) imports none of JAX, torch, kopf, kubernetes or the operator. Checked
in fresh interpreters, importing every module of each package."""

import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
JAX = ("jax", "jaxlib", "flax", "optax", "orbax")
FORBIDDEN = {
    "longctx_operator": (*JAX, "torch"),
    "longctx_trainer": ("kopf", "kubernetes", "longctx_operator", "torch"),
    "longctx_trainer.pytorch": (*JAX, "kopf", "kubernetes", "longctx_operator"),
    "longctx_trainer.contract": (*JAX, "torch", "kopf", "kubernetes", "longctx_operator"),
}
FOLDERS = {
    "longctx_operator": ROOT / "operator",
    "longctx_trainer": ROOT / "trainer",
    "longctx_trainer.pytorch": ROOT / "trainer" / "pytorch",
    "longctx_trainer.contract": ROOT / "trainer" / "contract",
}


def modules(package: str) -> list[str]:
    """The package's modules, less those of a package checked on its own (the PyTorch trainer and
    the contract)."""
    found = [package]
    for info in pkgutil.walk_packages([str(FOLDERS[package])], prefix=package + "."):
        found.append(info.name)
    apart = [p for p in FOLDERS if p.startswith(package + ".")]
    return sorted(m for m in found if not any(m == p or m.startswith(p + ".") for p in apart))


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


@pytest.mark.parametrize(
    "module, framework",
    [
        ("longctx_trainer.model", "jax"),
        ("longctx_trainer.pytorch.model", "torch"),
        ("longctx_operator.handlers", "kopf"),
    ],
)
def test_the_guard_sees_a_forbidden_import(module, framework):
    """The check above can fail: importing either trainer's model is seen as its framework, the
    operator's handlers as kopf."""
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    loaded = json.loads(
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()[-1]
    )
    assert framework in loaded


def test_the_pytorch_trainer_and_the_contract_are_checked_apart_from_the_jax_trainer():
    assert "longctx_trainer.pytorch.model" not in modules("longctx_trainer")
    assert "longctx_trainer.pytorch.model" in modules("longctx_trainer.pytorch")
    assert "longctx_trainer.contract.config" not in modules("longctx_trainer")
    assert "longctx_trainer.contract.config" in modules("longctx_trainer.contract")
