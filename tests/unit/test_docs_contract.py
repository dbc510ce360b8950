"""Docs tied to the code they describe: the pod environment's names (trainer/contract/podenv.py) in
docs/operator.md's table and wherever the docs name one. Also tied elsewhere: the data windows
(tests/unit/trainer/test_data.py) and the progress file (tests/unit/operator/test_localrun.py). And every
metric the docs name is one the code exports, every `longctx CMD --flag` one the CLI's parser takes,
and the README's configuration table gives the API's defaults."""

import argparse
import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from longctx_operator import metrics as operator_metrics
from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.cli import build_parser
from longctx_operator.planner.plan import HOST_MEMORY_MARGIN
from longctx_trainer.contract import podenv
from longctx_trainer.contract.metrics import TrainMetrics
from longctx_trainer.contract.model import ROPE_THETA
from longctx_trainer.stopwatch import STOP_FLOOR_SECONDS, STOP_STEPS
from support.docs import DOCS, code

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
        f"in trainer/contract/podenv.py, not in the table: {sorted(contract() - set(listed))}; "
        f"in the table, not in podenv: {sorted(set(listed) - contract())}"
    )


def test_every_pod_variable_the_docs_name_is_in_the_contract():
    named = {(doc.name, name) for doc in POD_DOCS for name in ENV_LIKE.findall(doc.read_text())}
    assert named, "the pattern finds nothing: the check would pass vacuously"
    unknown = sorted((doc, name) for doc, name in named if name not in contract())
    assert not unknown, f"named in the docs, not in trainer/contract/podenv.py: {unknown}"


# Metrics and CLI flags the docs name: each must be one the code exports or parses.
METRIC = re.compile(r"\blongctx_(?:train|operator)_\w*[a-z0-9]\b")
SUFFIXES = {"counter": ("", "_total"), "histogram": ("", "_bucket", "_sum", "_count"), "gauge": ("",)}


def collectors() -> list:
    """The metrics' one home: the trainer's exporter and the operator's own."""
    operator = [value for value in vars(operator_metrics).values() if isinstance(value, MetricWrapperBase)]
    return [TrainMetrics(job="probe", rank=0).registry, *operator]


def exported_metrics() -> set[str]:
    """Every metric family, and its series, that the code exports."""
    return {
        family.name + suffix
        for collector in collectors()
        for family in collector.collect()
        for suffix in SUFFIXES[family.type]
    }


def unknown_metrics(text: str) -> list[str]:
    return sorted(set(METRIC.findall(text)) - exported_metrics())


def cli_options() -> dict[str, set[str]]:
    """Each `longctx` subcommand's option strings, read from the CLI's own parser."""
    parser = build_parser()
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    options = {name: set(sub._option_string_actions) for name, sub in commands.choices.items()}
    return options | {"": set(parser._option_string_actions)}


# A command line that starts with longctx (maybe as .venv/bin/longctx, kubectl longctx, after VAR=value).
INVOCATION = re.compile(r"^\s*\$?\s*(?:\w+=\S*\s+)*(?:\S*/)?(?:kubectl\s+)?longctx\s+([a-z][\w-]*|-)(.*)")


def invocations(text: str) -> list[tuple[str, list[str]]]:
    """Each `longctx CMD --flag ...` command line in `text`'s code: the command ("" for none) and its flags."""
    found = []
    for span in code(text):
        for part in re.split(r"\||;|&&|#|\n", span):
            for command, rest in INVOCATION.findall(part):
                if command == "-":
                    command, rest = "", "-" + rest
                found.append((command, re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", rest)))
    return found


def unknown_flags(text: str) -> list[str]:
    """The commands and flags of `text`'s `longctx` command lines that the CLI's parser lacks."""
    options = cli_options()
    unknown = []
    for command, flags in invocations(text):
        if command not in options:
            unknown.append(f"longctx {command}")
        else:
            unknown += [f"longctx {command} {flag}" for flag in flags if flag not in options[command]]
    return unknown


def test_every_metric_the_docs_name_is_exported():
    assert "longctx_train_loss" in METRIC.findall((ROOT / "README.md").read_text()), "the check finds nothing"
    unknown = {doc.name: found for doc in DOCS if (found := unknown_metrics(doc.read_text()))}
    assert not unknown, (
        f"named in the docs, exported by neither trainer/contract/metrics.py nor operator/metrics.py: {unknown}"
    )


def test_the_metrics_reference_defines_each_metric_as_its_help_text():
    """One definition per metric: its help text in trainer/contract/metrics.py or operator/metrics.py opens
    its row in docs/observability.md, the one reference the other docs link to."""
    reference = (ROOT / "docs" / "observability.md").read_text()
    rows = {
        name.split("{")[0]: meaning
        for name, meaning in re.findall(r"^\| `([^`]+)` \| [^|]+ \| (.*) \|$", reference, re.M)
    }
    families = [family for collector in collectors() for family in collector.collect()]
    assert len(families) >= 15
    for family in families:
        name = family.name + ("_total" if family.type == "counter" else "")
        assert name in rows, f"{name} is not in docs/observability.md's metrics reference"
        assert rows[name].startswith(family.documentation), f"{name}: {rows[name]!r} is not {family.documentation!r}"


def test_every_cli_command_and_flag_the_docs_name_exists():
    assert ("operator", ["--all-namespaces"]) in invocations((ROOT / "README.md").read_text()), (
        "the check finds nothing"
    )
    unknown = {doc.name: found for doc in DOCS if (found := unknown_flags(doc.read_text()))}
    assert not unknown, f"named in the docs, not in operator/cli.py's parser: {unknown}"


def test_the_checks_catch_a_missing_metric_flag_and_command():
    doc = (
        "`longctx_train_loss`, `longctx_operator_reconciles_total` and `longctx_train_step_duration_seconds_bucket`"
        " exist; `longctx_train_perplexity` does not.\n"
        "```sh\nlongctx plan job.yaml --gpus-per-node 8 --no-such-flag 3 | kubectl apply -f -  # --not-ours\n"
        "longctx render -n team job.yaml\n.venv/bin/longctx frobnicate job.yaml\n```\n"
        "Run `longctx run job.yaml --run-dir .runs/x` or `longctx run --resume`; prose: longctx plans --nothing.\n"
    )
    assert unknown_metrics(doc) == ["longctx_train_perplexity"]
    assert unknown_flags(doc) == ["longctx plan --no-such-flag", "longctx frobnicate", "longctx run --resume"]


def _api_default(path: str):
    """The default of the API field at dotted camelCase `path` (e.g. restartPolicy.maxRestarts)."""
    model, value = LongContextJobSpec, None
    for part in path.split("."):
        (field,) = (f for f in model.model_fields.values() if f.alias == part)
        value = field.get_default(call_default_factory=True)
        model = field.annotation
    return value


def _readme_cell(value) -> str:
    """How the README's configuration table writes a default."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "on" if value else "off"
    return f"`{value}`" if isinstance(value, str) else str(value)


BOOLEAN_CELLS = {"`false`": "off", "false": "off", "`true`": "on", "true": "on"}


def readme_defaults() -> list[tuple[str, str]]:
    """(field, default as written) for each field of the README's configuration table whose
    default cell lists one plain value per field: numbers, `choices`, none, off."""
    rows = (ROOT / "README.md").read_text().split("\n## Configuration reference\n", 1)[1].split("\n#", 1)[0]
    found = []
    for row in rows.splitlines():
        if not row.startswith("| `"):
            continue
        names_cell, default_cell = row.split(" | ")[:2]
        names = re.findall(r"`([^`]+)`", names_cell)
        cells = [c.strip() for c in default_cell.split(",")]
        if len(cells) != len(names) or " / " in names_cell:
            continue
        prefix = names[0].rsplit(".", 1)[0]
        for name, cell in zip(names, cells, strict=True):
            cell = BOOLEAN_CELLS.get(cell, cell)
            if re.fullmatch(r"\d+|`[^`]+`|none|off|on", cell):
                found.append((name if "." in name else f"{prefix}.{name}", cell))
    return found


def test_the_readme_configuration_table_gives_the_apis_defaults():
    rows = readme_defaults()
    assert len(rows) >= 20, rows
    assert [(name, _readme_cell(_api_default(name))) for name, _ in rows] == rows
    readme = (ROOT / "README.md").read_text()
    assert f"(else {ROPE_THETA:.0f}, none)" in readme
    assert f"host offload within {HOST_MEMORY_MARGIN:.0%} of it" in readme
    assert f"exceed {HOST_MEMORY_MARGIN:.0%} of it" in (ROOT / "docs" / "planner.md").read_text()


def test_the_stop_watch_bounds_the_docs_give_are_the_launchers():
    for doc in ("trainer.md", "operator.md"):
        text = " ".join((ROOT / "docs" / doc).read_text().split())
        assert f"heartbeat for {STOP_STEPS} of its step times, at least {STOP_FLOOR_SECONDS:.0f} s," in text, doc
