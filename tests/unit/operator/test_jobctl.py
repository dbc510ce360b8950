"""operator/jobctl.py without a cluster: the job commands' arguments, the same in `longctx` and the
`kubectl-longctx` plugin, and the one-line errors when there is no cluster to ask."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from longctx_operator import cli, jobctl

ROOT = Path(__file__).resolve().parents[3]
COMMANDS = ["list", "status", "logs", "wait", "suspend", "resume", "delete"]


def test_the_plugin_is_installed_as_kubectl_longctx():
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["kubectl-longctx"] == "longctx_operator.jobctl:main"


def _subcommands(parser) -> dict:
    action = next(a for a in parser._actions if a.dest == "command")
    return action.choices


def _options(parser) -> set[str]:
    return {option for action in parser._actions for option in action.option_strings}


@pytest.mark.parametrize("command", COMMANDS)
def test_longctx_and_the_plugin_share_each_command_and_take_kubectls_connection_flags(command):
    ours, plugin = _subcommands(cli.build_parser())[command], _subcommands(jobctl.build_parser())[command]
    assert _options(ours) == _options(plugin)
    assert {"--kubeconfig", "--context", "-n", "--namespace"} <= _options(ours)


def test_logs_arguments():
    args = jobctl.build_parser().parse_args(["logs", "llama", "-f", "--rank", "3", "-n", "team"])
    assert (args.job, args.follow, args.rank, args.all_ranks, args.previous, args.namespace) == (
        "llama",
        True,
        3,
        False,
        False,
        "team",
    )
    assert jobctl.build_parser().parse_args(["logs", "llama"]).rank == 0


def test_wait_arguments():
    args = cli.build_parser().parse_args(["wait", "llama", "--for", "succeeded", "--timeout", "1h30m"])
    assert (args.phase, args.timeout) == ("Succeeded", 5400)
    assert cli.build_parser().parse_args(["wait", "llama", "--for", "Running"]).timeout == 600


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["logs", "llama", "--rank", "1", "--all-ranks"], "not allowed with argument"),
        (["logs", "llama", "--rank", "-1"], "must be 0 or more"),
        (["wait", "llama", "--for", "Done"], "'Done' is not a phase (one of Pending, Admitted"),
        (["wait", "llama", "--for", "Running", "--timeout", "soon"], "'soon' is not a duration"),
        (["wait", "llama"], "the following arguments are required: --for"),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        jobctl.build_parser().parse_args(argv)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def _run(*argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
    plugin = Path(sys.executable).parent / "kubectl-longctx"
    return subprocess.run([str(plugin), *argv], capture_output=True, text=True, env=env, timeout=60)


def _one_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 1 and proc.stdout == "", (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_without_a_kubeconfig_the_plugin_says_so_in_one_line(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    assert _one_line(_run("status", "llama", env=env)) == (
        "longctx: no cluster: $KUBECONFIG or ~/.kube/config is not a file (pass --kubeconfig, or set KUBECONFIG)"
    )


KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: nowhere
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: someone
  user: {token: abc}
contexts:
- name: ctx
  context: {cluster: nowhere, user: someone, namespace: team}
current-context: ctx
"""


def test_an_unreachable_api_server_and_an_unknown_context_are_one_line_each(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    line = _one_line(_run("status", "llama", "--kubeconfig", str(config)))
    assert line.startswith("longctx: cannot reach the API server https://127.0.0.1:1: ")
    assert _one_line(_run("list", "--kubeconfig", str(config), "--context", "other")) == (
        "longctx: --context other: not in the kubeconfig (it has ctx)"
    )


def test_the_namespace_comes_from_the_context_unless_given(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    assert jobctl.connect(str(config), None, None).namespace == "team"
    assert jobctl.connect(str(config), "ctx", "other").namespace == "other"


def test_previous_and_follow_are_refused_before_asking_the_cluster(tmp_path):
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    assert _one_line(_run("logs", "llama", "-f", "--previous", "--kubeconfig", str(config))) == (
        "longctx: --previous and --follow cannot be combined: the previous generation has ended"
    )


class Chunks:
    """A log response as it arrives: chunks that cut lines anywhere."""

    def __init__(self, *chunks: bytes):
        self.chunks = chunks

    def stream(self, amount):
        yield from self.chunks


def test_log_lines_of_several_ranks_are_whole_and_prefixed(capsysbinary):
    printer = jobctl._LinePrinter(prefix=True)
    printer.copy(Chunks(b"step 1\nst", b"ep 2\n", b"", b"no newline"), rank=3)
    assert capsysbinary.readouterr().out == b"[rank 3] step 1\n[rank 3] step 2\n[rank 3] no newline\n"
    jobctl._LinePrinter(prefix=False).copy(Chunks(b"a\nb\n"), rank=0)
    assert capsysbinary.readouterr().out == b"a\nb\n"
