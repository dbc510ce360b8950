"""The Markdown the docs tests read (tests/unit/test_docs_*.py) and where in it code is written."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", ROOT / "charts" / "longctx" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
SPAN = re.compile(r"`([^`]+)`")


def code(text: str) -> list[str]:
    """The text of every code block and inline code span, where docs name tests, files and commands."""
    return FENCE.findall(text) + SPAN.findall(FENCE.sub("", text))
