"""Write the images' pip constraints from the project's tested virtualenv.

Each image installs longctx (operator) or longctx[trainer] (trainer) with `pip --constraint`; the
constraints are the dependency closure of that requirement at the versions installed in the
virtualenv the test suite runs in. Run `.venv/bin/python images/pins.py` after a dependency
change; `--check` exits 1 when a file is stale.
"""

from __future__ import annotations

import argparse
import sys
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

IMAGES = Path(__file__).resolve().parent
TARGETS = {"operator": (), "trainer": ("trainer",)}
HEADER = (
    "# Exact versions for the {image} image: the dependency closure of longctx{extras} as\n"
    "# installed in the project's tested virtualenv. Written by images/pins.py; do not edit.\n"
)


def closure(name: str, extras: tuple[str, ...] = ()) -> dict[str, str]:
    """Installed version of every distribution `name[extras]` needs (markers evaluated here)."""
    versions: dict[str, str] = {}
    done: set[tuple[str, str]] = set()
    pending = [(name, extra) for extra in (*extras, "")]
    while pending:
        current, extra = pending.pop()
        key = canonicalize_name(current)
        if (key, extra) in done:
            continue
        done.add((key, extra))
        dist = distribution(current)
        versions[key] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
                pending += [(requirement.name, sub) for sub in (*requirement.extras, "")]
    versions.pop(canonicalize_name(name))
    return versions


def render(image: str) -> str:
    extras = TARGETS[image]
    pins = closure("longctx", extras)
    suffix = f"[{','.join(extras)}]" if extras else ""
    return HEADER.format(image=image, extras=suffix) + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a constraints file is stale")
    args = parser.parse_args(argv)
    stale = 0
    for image in TARGETS:
        path = IMAGES / image / "constraints.txt"
        text = render(image)
        if args.check:
            if not path.exists() or path.read_text() != text:
                print(f"stale: {path} (run python images/pins.py)", file=sys.stderr)
                stale += 1
        else:
            path.write_text(text)
            print(path)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
