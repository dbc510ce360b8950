"""A short run of the manifest fuzzer (tests/support/fuzz.py; `hack/fuzz-manifests` runs 5,000):
mutated manifests never make validate, plan or render crash or refuse without a readable line."""

from longctx_operator.api import problems
from support.fuzz import check, fuzz, seeds


def test_every_seed_is_valid():
    """Mutations start from valid jobs, one of them with every optional field a rule reads set."""
    for seed in seeds():
        assert problems(seed) == [], seed["metadata"]["name"]


def test_mutated_manifests_never_crash_the_cli():
    failures, outcomes = fuzz(count=300, seed=20261124)
    assert not failures, "\n".join(f"{f.command}: {f.reason}\n{f.manifest[:600]!r}" for f in failures[:5])
    assert outcomes["valid"] and outcomes["refused"]  # the mutations reach both outcomes


def test_the_checker_catches_a_multi_line_refusal(tmp_path, monkeypatch):
    """The fuzzer's own oracle can fail: a refusal spread over two lines is reported."""
    from longctx_operator import cli

    def two_lines(args):
        raise cli.UsageError("first line\nsecond line")

    monkeypatch.setattr(cli, "cmd_plan", two_lines)
    parser = cli.build_parser
    monkeypatch.setattr(cli, "build_parser", lambda: _with_plan(parser(), two_lines))
    failures, _ = check(b"apiVersion: longctx.io/v1alpha1\nkind: LongContextJob\n", tmp_path)
    assert [f.command for f in failures] == ["plan"]


def _with_plan(parser, func):
    for action in parser._subparsers._group_actions:
        action.choices["plan"].set_defaults(func=func)
    return parser
