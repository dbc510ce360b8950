"""Reading XLA HLO text (`jax.jit(f).lower(...).as_text(dialect="hlo")`) in tests: instructions by
name, which dots XLA's GPU GEMM rewriter can turn into FP8 GEMMs, and which loops run collectives."""

from __future__ import annotations

import re
from dataclasses import dataclass

_LINE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = (\S+) ([\w\-]+)\((.*?)\)(?:, |$)")
_TYPE = re.compile(r"[a-z]\w*\[[\d,]*\](?:\{[^}]*\})?\s*")
LAYOUT_OPS = {"bitcast", "broadcast", "copy", "reshape", "transpose", "slice", "dynamic-slice", "pad"}
"""Ops the rewriter lets stand between the dequantization and the dot (they commute with it)."""
FP8_TYPES = ("f8e4m3fn", "f8e5m2")
COLLECTIVES = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")
_COLLECTIVE = re.compile(rf" (?:{'|'.join(COLLECTIVES)})(?:-start)?\(")
_HEADER = re.compile(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$")
_CALLED = re.compile(r"(?:body|condition|calls|to_apply|true_computation|false_computation)=%?([\w.\-]+)")
_BRANCHES = re.compile(r"branch_computations=\{([^}]*)\}")
_WHILE_BODY = re.compile(r" while\(.*\bbody=%?([\w.\-]+)")


@dataclass(frozen=True)
class Instruction:
    name: str
    dtype: str  # element type, e.g. "bf16"; "" for a tuple
    opcode: str
    operands: tuple[str, ...]


def instructions(text: str) -> dict[str, Instruction]:
    """Every instruction of every computation, by name (HLO names are module-unique)."""
    found = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            name, shape, opcode, args = match.groups()
            operands = tuple(a.strip().lstrip("%") for a in _TYPE.sub("", args).split(",") if a.strip())
            found[name] = Instruction(name, shape.split("[")[0] if "[" in shape else "", opcode, operands)
    return found


FOLDABLE = {"convert"}
"""Producers of an FP8 value that XLA's GPU excess-precision pass folds with the dequantizing
convert (convert(convert(x, f8), bf16) -> convert(x, bf16)), leaving no FP8 for the rewriter."""


def fp8_dots(text: str) -> list[tuple[str, str]]:
    """The FP8 element types (lhs, rhs) of each dot the GEMM rewriter matches: each operand, back
    through layout-only ops, is multiply(convert(an FP8 value), broadcast(scale)) with the convert
    going straight to the dot's operand type, and the FP8 value not itself a convert (FOLDABLE)."""
    program = instructions(text)

    def fp8_source(name: str) -> str | None:
        op = program[name]
        while op.opcode in LAYOUT_OPS:
            op = program[op.operands[0]]
        if op.opcode != "multiply":
            return None
        first, second = (program[o] for o in op.operands)
        for convert, scale in ((first, second), (second, first)):
            if convert.opcode == "convert" and scale.opcode == "broadcast":
                value = program[convert.operands[0]]
                if value.dtype in FP8_TYPES and value.opcode not in FOLDABLE and convert.dtype == op.dtype:
                    return value.dtype
        return None

    dots = []
    for op in program.values():
        if op.opcode == "dot":
            lhs, rhs = (fp8_source(o) for o in op.operands)
            if lhs and rhs:
                dots.append((lhs, rhs))
    return dots


def _computations(text: str) -> dict[str, list[str]]:
    """Each computation's lines, by name."""
    found: dict[str, list[str]] = {}
    lines: list[str] = []
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            lines = found.setdefault(header.group(1), [])
        elif line.startswith(" "):
            lines.append(line)
    return found


def loops_holding_collectives(text: str) -> list[str]:
    """The while bodies (of a compiled module's text) that run a collective, themselves or in a
    computation they call."""
    computations = _computations(text)

    def called(lines: list[str]) -> set[str]:
        names = {m for line in lines for m in _CALLED.findall(line)}
        for line in lines:
            names |= {b.strip().lstrip("%") for group in _BRANCHES.findall(line) for b in group.split(",")}
        return names & computations.keys()

    def holds(name: str, seen: frozenset[str] = frozenset()) -> bool:
        lines = computations[name]
        return any(_COLLECTIVE.search(line) for line in lines) or any(
            holds(c, seen | {name}) for c in called(lines) - seen - {name}
        )

    bodies = {m for lines in computations.values() for line in lines for m in _WHILE_BODY.findall(line)}
    return sorted(b for b in bodies if b in computations and holds(b))
