"""Every test, script or source file the docs name exists, every named test is defined, and every
relative link (with its #anchor) leads somewhere: a move or rename updates the docs too."""

import re
from pathlib import Path

from support.docs import DOCS, FENCE, ROOT, SPAN, code

PATH = re.compile(
    r"`((?:tests|operator|trainer|hack|benchmarks|images|dashboards|alerts|charts|examples|crds)/[\w./-]+?)`"
)
# `tests/unit/x.py::test_y`, a bare `test_y` (a function or Test class) or a bare `test_x.py`.
NODE = re.compile(r"(tests/[\w/]+\.py)::(\w+)")
BARE = re.compile(r"(?<![\w/.:-])((?:test_|Test[A-Z])\w*)(\.py)?(?![\w*/])")
LINK = re.compile(r"\]\(([^)\s]+)\)")


def named_paths() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for doc in DOCS:
        for match in PATH.finditer(re.sub(r"::\w+", "", doc.read_text())):
            path = match.group(1).rstrip(".")
            if "*" not in path and "<" not in path:
                found.setdefault(path, []).append(doc.name)
    return found


def defined_tests(root: Path = ROOT) -> tuple[dict[str, set[str]], set[str]]:
    """Test files by name (the paths holding each), and every test module, function and class."""
    files: dict[str, set[str]] = {}
    names: set[str] = set()
    for path in (root / "tests").rglob("*.py"):
        files.setdefault(path.name, set()).add(path.relative_to(root).as_posix())
        names.add(path.stem)
        for function, cls in re.findall(r"^\s*(?:async\s+)?def (test_\w+)|^class (Test\w+)", path.read_text(), re.M):
            names.add(function or cls)
    return files, names


def missing_tests(text: str, root: Path = ROOT) -> list[str]:
    """The tests and test files `text` names (in code, or bare in prose) that do not exist under root/tests."""
    files, names = defined_tests(root)
    missing = []
    for span in [*code(text), SPAN.sub("", FENCE.sub("", text))]:
        for path, name in NODE.findall(span):
            source = root / path
            if not source.exists() or not re.search(
                rf"^\s*(?:async\s+)?def {name}\b|^class {name}\b", source.read_text(), re.M
            ):
                missing.append(f"{path}::{name}")
        for name, py in BARE.findall(NODE.sub("", span)):
            if (py and name + py not in files) or (not py and name not in names):
                missing.append(name + py)
    return missing


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def broken_links(doc: Path) -> list[str]:
    """Relative links of `doc` whose file, or whose #anchor in a Markdown file, does not exist."""
    broken = []
    for target in LINK.findall(SPAN.sub("", FENCE.sub("", doc.read_text()))):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md":
            headings = re.findall(r"^#+ (.*)$", FENCE.sub("", linked.read_text()), re.M)
            if anchor not in {slug(heading) for heading in headings}:
                broken.append(target)
    return broken


def test_every_path_the_docs_name_exists():
    missing = {path: docs for path, docs in named_paths().items() if not (ROOT / path).exists()}
    assert not missing, missing


def test_the_docs_name_paths():
    assert "tests/unit/trainer/test_model_parallel.py" in named_paths()


def test_every_test_the_docs_name_exists():
    missing = {doc.name: found for doc in DOCS if (found := missing_tests(doc.read_text()))}
    assert not missing, f"named in the docs, not defined under tests/: {missing}"


def test_the_test_check_catches_a_missing_test():
    doc = (
        "`tests/unit/test_docs_paths.py::test_every_test_the_docs_name_exists` and `test_the_docs_name_paths` "
        "exist; `tests/unit/test_docs_paths.py::test_that_was_renamed`, `test_gone` and `test_gone.py` do not.\n"
        "```sh\npytest tests/unit -k test_never_written\n```\n"
        "In prose test_cluster_nodes (a module) exists, test_in_prose does not; test_cluster_* is a pattern.\n"
    )
    assert missing_tests(doc) == [
        "test_never_written",
        "tests/unit/test_docs_paths.py::test_that_was_renamed",
        "test_gone",
        "test_gone.py",
        "test_in_prose",
    ]


def test_every_relative_link_leads_to_a_file_and_heading():
    broken = {doc.name: found for doc in DOCS if (found := broken_links(doc))}
    assert not broken, f"links to a missing file or heading: {broken}"


def test_the_link_check_catches_a_missing_heading(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## The PyTorch example trainer (`pytorch/`)\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[ok](other.md#the-pytorch-example-trainer-pytorch), [web](https://example.com/x#y), "
        "[gone](other.md#scale), [no file](missing.md), `[not a link](in-code.md)`\n"
    )
    assert broken_links(doc) == ["other.md#scale", "missing.md"]
