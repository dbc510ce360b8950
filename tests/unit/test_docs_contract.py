"""Docs tied to the code they describe: the pod environment's names (trainer/podenv.py) in
docs/operator.md's table and wherever the docs name one. Also tied elsewhere: the data windows
(tests/unit/trainer/test_data.py) and the progress file (tests/unit/operator/test_localrun.py)."""

import re
from pathlib import Path

from longctx_trainer import podenv

ROOT = Path(__file__).resolve().parents[2]
# The docs about pods and trainers; docs/cluster.md, e2e.md and images.md name the test tools' own
# LONGCTX_* settings, which are not pod environment.
POD_DOCS = [
    ROOT / "README.md",
    *(ROOT / "docs" / f"{name}.md" for name in ("operator", "trainer", "architecture", "security")),
]
ENV_LIKE = re.compile(r"\b(?:JAX|LONGCTX|XLA|PET)_[A-Z0-9_]*[A-Z0-9]\b(?!\*)")


def contract() -> set[str]:
    names = {v for k, v in vars(podenv).items() if k.isupper() and isinstance(v, str) and k != "RESERVED_PREFIX"}
    return names | set(podenv.TORCHRUN)


def table(doc: Path, heading: str) -> list[str]:
    """The backquoted names of the first column of the table under `heading`."""
    section = doc.read_text().split(f"\n{heading}\n", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return [name for row in rows for name in re.findall(r"`([^`]+)`", row.split(" | ")[0])]


def test_the_pod_environment_table_lists_exactly_the_contract():
    listed = table(ROOT / "docs" / "operator.md", "## The pod environment")
    assert len(listed) == len(set(listed)), "a name listed twice"
    assert set(listed) == contract(), (
        f"in trainer/podenv.py, not in the table: {sorted(contract() - set(listed))}; "
        f"in the table, not in podenv: {sorted(set(listed) - contract())}"
    )


def test_every_pod_variable_the_docs_name_is_in_the_contract():
    named = {(doc.name, name) for doc in POD_DOCS for name in ENV_LIKE.findall(doc.read_text())}
    assert named, "the pattern finds nothing: the check would pass vacuously"
    unknown = sorted((doc, name) for doc, name in named if name not in contract())
    assert not unknown, f"named in the docs, not in trainer/podenv.py: {unknown}"
