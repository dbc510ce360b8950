"""`longctx`: validate, plan, render and run LongContextJobs; print the CRD; run the operator.

Every failure a user can cause ends with one readable line on stderr and a non-zero exit, never a
traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import yaml

from .api.validate import InvalidJob, parse_job, problems


class UsageError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


def _load_manifest(path: str) -> dict:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark else ""
        raise UsageError(f"{path}: not valid YAML{where}: {getattr(e, 'problem', e)}") from None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == "LongContextJob"]
    if len(jobs) != 1:
        if len(docs) == 1:
            return docs[0]  # let validation name what is wrong with it
        raise UsageError(f"{path}: expected exactly one LongContextJob, found {len(jobs)}")
    return jobs[0]


def cmd_validate(args) -> int:
    manifest = _load_manifest(args.file)
    found = problems(manifest)
    for problem in found:
        print(f"{args.file}: {problem}", file=sys.stderr)
    if found:
        return 1
    print(f"{args.file}: valid")
    return 0


def cmd_crd(args) -> int:
    from .api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _job_from(path: str):
    try:
        return parse_job(_load_manifest(path))
    except InvalidJob as e:
        raise UsageError(f"{path}: {e.problems[0]}"
                         + (f" (and {len(e.problems) - 1} more problems; run longctx validate)"
                            if len(e.problems) > 1 else "")) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="longctx", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a LongContextJob manifest; each problem names its field")
    p.add_argument("file", help="manifest path, or - for stdin")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("crd", help="print the CustomResourceDefinition generated from the API models")
    p.set_defaults(func=cmd_crd)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"longctx: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
