"""Manifest fuzzing: mutated LongContextJob manifests through `longctx validate`, `plan` and `render`.

Each mutation starts from an example or the malformed-case base and breaks it the way careless or
hostile authors do: a value of the wrong type, a huge or non-finite number, a hostile string
(every YAML line break, indicators, tags, anchors), a deleted or unknown key, deep nesting, alias
bombs, duplicate keys, invalid UTF-8, a truncated file. A run passes when every command either
succeeds or exits 1 with one readable line on stderr: no traceback, no other exit code, and a
rendered output that loads back as YAML.

    python -m support.fuzz --count 5000 --seed 1      (PYTHONPATH=tests; hack/fuzz-manifests)
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import random
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import yaml

from longctx_operator.cli import main

from .manifests import EXAMPLES, apply_case, load_example, malformed_cases

HOSTILE_STRINGS = [
    "",
    " ",
    "x\ny: 1",
    "x\r\nprivileged: true",
    "x\x85hostPID: true",
    "x\u2028kind: Job",
    "x\u2029",
    "true",
    "no",
    "~",
    "null",
    "0x1F",
    "1e309",
    ".inf",
    "-.nan",
    "[a, b]",
    "{a: 1}",
    "!!binary aGk=",
    "!!python/object:os.system",
    "&a x",
    "*a",
    "x #y",
    "- a",
    "? x",
    ">\n  folded",
    "|\n  block",
    "---",
    "...",
    "%YAML 1.1",
    "'",
    '"',
    "\\",
    "\x00",
    "\x7f",
    "\udc80",
    "é",
    "€" * 200,
    "a" * 5000,
    "../../etc/passwd",
    "/etc/longctx",
    "/dev/shm",
    "/etc/./longctx",
    "/dev//shm",
    "/checkpoints/../checkpoints",
    "a//b",
    "node.kubernetes.io/unschedulable",
    "requests.rdma/hca",
    "rdma..example.com/hca",
    "rdma/" + "h" * 64,
    "system-node-critical",
    "Exists",
    "NoExecute",
    "w" * 64,
    "http://metrics.example.com.attacker.net/",
    "gs://b/x",
    "file:///var/run/secrets/token",
    "nvidia.com/gpu",
    "JAX_PROCESS_ID",
    "LONGCTX_COORDINATOR",
    "$(HOME)",
    "${HOME}",
    "`id`",
]
NUMBERS = [
    0,
    -1,
    1,
    7,
    2**31,
    2**53,
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    10**30,
    -(2**63) - 1,
    0.5,
    -0.0,
    1e308,
    1e-320,
    float("inf"),
    float("-inf"),
    float("nan"),
]
OTHERS = [None, True, False, [], {}, [None], [[[]]], {"": None}, {"a": {"b": {"c": {}}}}]


@dataclass(frozen=True)
class Failure:
    command: str
    reason: str
    manifest: bytes


# The malformed-case base with every optional field that a rule or the renderer reads set, so that
# mutations reach them: tolerations, ports, the RDMA resource, Kueue's priority, a CPU job's
# resources and claim mount paths.
SCHEDULING_SEED = {
    "set": {
        "spec.scheduling": {
            "admission": "kueue",
            "queueName": "team-a",
            "workloadPriorityClassName": "high",
            "priorityClassName": "training-high",
            "tolerations": [
                {"key": "example.com/pool", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "example.com/evict", "operator": "Equal", "value": "a", "effect": "NoExecute"},
                {"key": "example.com/drain", "effect": "NoExecute", "tolerationSeconds": 60},
            ],
        },
        "spec.network": {"fabric": "infiniband", "rdmaResource": "rdma/hca_shared_devices_a", "coordinatorPort": 9000},
        "spec.metrics.port": 9400,
        "spec.checkpoint": {"path": "/checkpoints/run", "persistentVolumeClaim": "ckpt"},
        "spec.initFrom": {"path": "/weights/llama", "persistentVolumeClaim": "weights"},
    }
}
CPU_SEED = {
    "set": {
        "spec.resources": {"nodes": 2, "gpusPerNode": 4, "gpuType": "cpu", "cpu": "1", "memory": "2Gi"},
        "spec.network": {"fabric": "tcp"},
        "spec.parallelism": {"mode": "manual", "data": 2, "context": 4, "tensor": 1, "processesPerNode": 2},
        "spec.metrics.port": 9400,
    }
}


def seeds() -> list[dict]:
    base, _ = malformed_cases()
    return [base, apply_case(base, SCHEDULING_SEED), apply_case(base, CPU_SEED)] + [
        load_example(path) for path in EXAMPLES
    ]


def _paths(node, prefix=()) -> list[tuple]:
    """Every (key or index) path into the document, containers included."""
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, prefix + (key,))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, prefix + (index,))
    return out


def _get(doc, path):
    for part in path:
        doc = doc[part]
    return doc


def _random_value(rng: random.Random):
    kind = rng.random()
    if kind < 0.45:
        return rng.choice(HOSTILE_STRINGS)
    if kind < 0.8:
        return rng.choice(NUMBERS)
    return copy.deepcopy(rng.choice(OTHERS))


def _mutate_data(doc: dict, rng: random.Random) -> dict:
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            break
        path = rng.choice(paths)
        parent, leaf = _get(doc, path[:-1]), path[-1]
        action = rng.random()
        if action < 0.55:
            parent[leaf] = _random_value(rng)
        elif action < 0.7 and isinstance(parent, dict):
            del parent[leaf]
        elif action < 0.8 and isinstance(parent, dict):
            parent[rng.choice(HOSTILE_STRINGS[:30]) or "k"] = _random_value(rng)
        elif action < 0.9:
            parent[leaf] = [parent[leaf]] * rng.randint(0, 3)
        else:
            parent[leaf] = {"nested": parent[leaf]}
    return doc


def _dump(doc) -> bytes:
    try:
        return yaml.safe_dump(doc, allow_unicode=True, sort_keys=False).encode("utf-8", "surrogatepass")
    except (yaml.YAMLError, ValueError):
        return repr(doc).encode("utf-8", "surrogatepass")


def _mutate_text(text: bytes, rng: random.Random) -> bytes:
    """Damage the file itself: what the YAML loader must survive."""
    lines = text.splitlines(keepends=True) or [b"\n"]
    choice = rng.randrange(9)
    at = rng.randrange(len(lines))
    if choice == 0:
        return text[: rng.randrange(len(text) + 1)]  # truncated
    if choice == 1:
        return b"".join(lines[: at + 1] + [lines[at]] + lines[at + 1 :])  # a duplicate key
    if choice == 2:
        return (
            b"a: &a ["
            + b"x, " * 9
            + b"x]\n"
            + b"".join(
                f"{chr(98 + i)}: &{chr(98 + i)} [".encode() + b", ".join([f"*{chr(97 + i)}".encode()] * 9) + b"]\n"
                for i in range(8)
            )
            + text
        )  # an alias bomb
    if choice == 3:
        depth = rng.choice([100, 1000, 50000])
        return text + b"spec2: " + b"[" * depth + b"]" * depth + b"\n"  # deep nesting
    if choice == 4:
        return text.replace(b"  ", b"\t", 1)  # a tab as indentation
    if choice == 5:
        return b"\xef\xbb\xbf" + text if rng.random() < 0.5 else text + b"\xff\xfe\x80"  # BOM / invalid UTF-8
    if choice == 6:
        return text + b"---\n" + text  # two documents
    if choice == 7:
        return text.replace(b": ", b": !!python/tuple ", 1)  # an unsafe tag
    return b"".join(lines[:at] + [bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))] + lines[at:])


def mutations(count: int, seed: int):
    rng = random.Random(seed)
    starts = seeds()
    for _ in range(count):
        doc = _mutate_data(rng.choice(starts), rng)
        text = _dump(doc)
        if rng.random() < 0.3:
            text = _mutate_text(text, rng)
        yield text


def _run(argv: list[str]) -> tuple[int | None, str, str, str | None]:
    out, err = io.StringIO(), io.StringIO()
    crash = None
    code: int | None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        except BaseException:  # noqa: BLE001 - any escaping exception is the bug being hunted
            code, crash = None, traceback.format_exc()
    return code, out.getvalue(), err.getvalue(), crash


def _readable_refusal(command: str, err: str, path: Path) -> bool:
    """Exit 1 must explain itself: validate prints one line per problem, each naming the file;
    plan and render end with one `longctx: ...` line (after any advice lines about the job)."""
    lines = err.strip().splitlines()
    if not lines or "Traceback" in err:
        return False
    if command == "validate":
        return all(line.startswith((f"{path}: ", "longctx: ")) for line in lines)
    return lines[-1].startswith("longctx: ")


def check(text: bytes, workdir: Path) -> tuple[list[Failure], bool]:
    """The failures of one manifest, and whether `longctx validate` accepted it."""
    path = workdir / "job.yaml"
    path.write_bytes(text)
    failures, valid = [], False
    for command in ("validate", "plan", "render"):
        code, out, err, crash = _run([command, str(path)])
        if command == "validate":
            valid = code == 0
        if crash is not None:
            failures.append(Failure(command, "traceback:\n" + crash, text))
        elif code not in (0, 1):
            failures.append(Failure(command, f"exit code {code}", text))
        elif code == 1 and not _readable_refusal(command, err, path):
            failures.append(Failure(command, f"refused without a readable line: {err[:500]!r}", text))
        elif code == 0 and command == "render":
            try:
                kinds = [doc.get("kind") for doc in yaml.safe_load_all(out) if doc]
            except yaml.YAMLError as e:
                failures.append(Failure(command, f"rendered YAML does not load: {e}", text))
            else:
                if kinds != ["Service", "ConfigMap", "Job"]:
                    failures.append(Failure(command, f"rendered kinds {kinds}", text))
    return failures, valid


def fuzz(count: int, seed: int) -> tuple[list[Failure], dict[str, int]]:
    outcomes = {"valid": 0, "refused": 0}
    failures: list[Failure] = []
    with tempfile.TemporaryDirectory() as scratch:
        for text in mutations(count, seed):
            found, valid = check(text, Path(scratch))
            failures += found
            outcomes["valid" if valid else "refused"] += 1
    return failures, outcomes


def cli(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.monotonic()
    failures, outcomes = fuzz(args.count, args.seed)
    print(
        f"{args.count} mutated manifests (seed {args.seed}) through validate, plan and render in "
        f"{time.monotonic() - started:.0f} s: {outcomes['valid']} valid, {outcomes['refused']} refused, "
        f"{len(failures)} failures"
    )
    for failure in failures[:10]:
        print(f"--- {failure.command}: {failure.reason}\n{failure.manifest[:600]!r}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(cli())
