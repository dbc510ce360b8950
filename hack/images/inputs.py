"""What hack/images/build reads from the project's files, so that the script parses neither YAML
nor a Dockerfile itself. Run by the host's python3 (PyYAML: Debian's python3-yaml, which
hack/images/deps installs):
  inputs.py app-version            the chart's appVersion (charts/longctx/Chart.yaml)
  inputs.py copied-sources FILE    one line per build-context path that FILE's COPY lines take
                                   (a COPY --from=STAGE takes nothing from the context)
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def app_version(chart: Path = ROOT / "charts" / "longctx" / "Chart.yaml") -> str:
    version = (yaml.safe_load(chart.read_text()) or {}).get("appVersion")
    if not version:
        raise SystemExit(f"hack/images/build: no appVersion in {chart}")
    return str(version)


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined and comment lines dropped."""
    joined, current = [], ""
    for line in dockerfile.splitlines():
        if not current and line.lstrip().startswith("#"):
            continue
        current += line.rstrip()
        if current.endswith("\\"):
            current = current[:-1] + " "
            continue
        if current.strip():
            joined.append(current.strip())
        current = ""
    if current.strip():
        joined.append(current.strip())
    return joined


def copied_sources(dockerfile: str) -> list[str]:
    """The sources of the COPY instructions that copy from the build context, in order."""
    found = []
    for instruction in instructions(dockerfile):
        keyword, _, rest = instruction.partition(" ")
        if keyword.upper() != "COPY":
            continue
        words = shlex.split(rest)
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from=") for f in flags):
            continue
        paths = [w for w in words if not w.startswith("--")]
        if paths and paths[0].startswith("["):  # the JSON form: COPY ["src", ..., "dest"]
            paths = json.loads(rest[rest.index("[") :])
        found.extend(paths[:-1])
    return found


def main(argv: list[str]) -> None:
    match argv:
        case ["app-version"]:
            print(app_version())
        case ["copied-sources", path]:
            print(*copied_sources(Path(path).read_text()), sep="\n")
        case _:
            raise SystemExit("usage: inputs.py app-version | copied-sources DOCKERFILE")


if __name__ == "__main__":
    main(sys.argv[1:])
