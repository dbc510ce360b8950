"""pyproject.toml's package list is the source tree: the images install longctx as a wheel (not
editable), and a folder left out of `packages` would be missing from it without a word."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_source_folder_is_a_declared_package_and_no_other():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = set()
    for package, folder in setuptools["package-dir"].items():
        for module in (ROOT / folder).rglob("*.py"):
            parts = module.parent.relative_to(ROOT / folder).parts
            on_disk.add(".".join((package, *parts)))
    assert on_disk == set(setuptools["packages"]), (
        f"folders not declared: {sorted(on_disk - set(setuptools['packages']))}; "
        f"declared, not there: {sorted(set(setuptools['packages']) - on_disk)}"
    )
