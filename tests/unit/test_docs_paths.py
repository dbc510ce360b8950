"""Every test, script or source file the docs name exists: a move or rename updates the docs too."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "charts" / "longctx" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`((?:tests|operator|trainer|hack|benchmarks|images|dashboards|alerts|charts)/[\w./-]+?)(?:::\w+)?`")


def named_paths() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for match in PATH.finditer(doc.read_text()):
            path = match.group(1).rstrip(".")
            if "*" not in path and "<" not in path:
                found.setdefault(path, []).append(doc.name)
    return found


def test_every_path_the_docs_name_exists():
    missing = {path: docs for path, docs in named_paths().items() if not (ROOT / path).exists()}
    assert not missing, missing


def test_the_docs_name_paths():
    assert "tests/unit/trainer/test_model_parallel.py" in named_paths()
