"""`longctx`: validate, plan, render, run and export LongContextJobs; tokenize text; print the CRD;
run the operator.

Every failure a user can cause ends with one readable line on stderr and a non-zero exit, never a
traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

from longctx_trainer.contract.config import is_url

from .api.validate import InvalidJob, parse_job, problems
from .names import API_VERSION, KIND
from .planner import PlanError
from .resolve import resolve_layout


class UsageError(Exception):
    """A user-facing error: printed as one line, exit code 1."""


def _load_manifest(path: str) -> dict:
    from .api.manifest import ManifestError, load_documents

    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        text = data.decode("utf-8")
    except OSError as e:
        raise UsageError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file (UTF-8 expected)") from None
    try:
        docs = load_documents(text)
    except ManifestError as e:
        raise UsageError(f"{path}: {e}") from None
    jobs = [d for d in docs if isinstance(d, dict) and d.get("kind") == KIND]
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
    job = parse_job(manifest)
    _warn(args.file, job)
    try:  # the operator plans the job when it sees it: a job no layout can run is not valid
        resolve_layout(job.spec)
    except PlanError as e:
        print(f"{args.file}: {e}", file=sys.stderr)
        return 1
    print(f"{args.file}: valid")
    return 0


def _warn(path: str, job) -> None:
    """Prints what in a valid job is likely a mistake on Kubernetes (api/advice.py)."""
    from .api.advice import cli_advice

    for warning in cli_advice(job.spec):
        print(f"{path}: {warning}", file=sys.stderr)


def cmd_crd(args) -> int:
    from .api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _job_from(path: str):
    try:
        return parse_job(_load_manifest(path))
    except InvalidJob as e:
        raise UsageError(
            f"{path}: {e.problems[0]}"
            + (f" (and {len(e.problems) - 1} more problems; run longctx validate)" if len(e.problems) > 1 else "")
        ) from None


# Each plan flag and the spec field it sets, so a flag's error names the flag.
_PLAN_FLAGS = {
    "spec.model.preset": "--model",
    "spec.sequenceLength": "--sequence-length",
    "spec.globalBatchTokens": "--global-batch-tokens",
    "spec.resources.nodes": "--nodes",
    "spec.resources.gpusPerNode": "--gpus-per-node",
    "spec.resources.gpuType": "--gpu-type",
    "spec.network.fabric": "--fabric",
    "spec.network.rack.nodes": "--rack-nodes",
    "spec.network.rack.oversubscription": "--rack-oversubscription",
    "spec.precision": "--precision",
    "spec.parallelism.attention": "--attention",
    "spec.parallelism.ulysses": "--ulysses",
    "spec.offload.enabled": "--offload",
    "spec.offload.chunkTokens": "--chunk-tokens",
    "spec.resources.memory": "--memory",
}


def _deprecated_plan_flags(args) -> None:
    """`--gpu` and `--gpus` (total GPUs) predate the flags named after the CRD's fields: still
    accepted, with one line saying what to write instead."""
    from .api.spec import ResourcesSpec

    if args.gpu is not None:
        print("longctx: warning: --gpu is deprecated: use --gpu-type (spec.resources.gpuType)", file=sys.stderr)
        if args.gpu_type is not None:
            raise UsageError("--gpu and --gpu-type: give --gpu-type only")
        args.gpu_type = args.gpu
    if args.gpus is not None:
        print(
            "longctx: warning: --gpus is deprecated: use --nodes and --gpus-per-node (spec.resources)",
            file=sys.stderr,
        )
        if args.nodes is not None:
            raise UsageError("--gpus and --nodes: give --nodes only")
        per_node = args.gpus_per_node or ResourcesSpec.model_fields["gpus_per_node"].default
        if per_node < 1 or args.gpus < per_node or args.gpus % per_node:
            raise UsageError(f"--gpus {args.gpus} must be a positive multiple of --gpus-per-node {per_node}")
        args.nodes = args.gpus // per_node


def _spec_from_flags(args) -> dict:
    """The LongContextJob the plan flags describe: it goes through validation like a file (the
    flags left out take the API's defaults)."""
    spec: dict = {"model": {"preset": args.model}, "sequenceLength": args.sequence_length, "offload": {}}
    optional = {
        ("globalBatchTokens",): args.global_batch_tokens,
        ("resources", "nodes"): args.nodes,
        ("resources", "gpusPerNode"): args.gpus_per_node,
        ("resources", "gpuType"): args.gpu_type,
        ("network", "fabric"): args.fabric,
        ("network", "rack", "nodes"): args.rack_nodes,
        ("network", "rack", "oversubscription"): args.rack_oversubscription,
        ("precision",): args.precision,
        ("parallelism", "attention"): args.attention,
        ("parallelism", "ulysses"): args.ulysses,
        ("offload", "enabled"): args.offload,
        ("offload", "chunkTokens"): args.chunk_tokens,
        ("resources", "memory"): args.memory,
    }
    for path, value in optional.items():
        if value is not None:
            parent = spec
            for key in path[:-1]:
                parent = parent.setdefault(key, {})
            parent[path[-1]] = value
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "plan"}, "spec": spec}


def _plan_request_from_flags(args):
    """The flags' job, validated with the API's own rules; pinned axes are applied on top (the
    planner chooses the others, which a manifest cannot express)."""
    import dataclasses

    from .resolve import plan_request

    _deprecated_plan_flags(args)
    found = problems(_spec_from_flags(args))
    if found:
        first = found[0]
        flag = next((f for field, f in _PLAN_FLAGS.items() if first.field.startswith(field)), None)
        if first.field == "spec.resources.nodes" and args.gpus is not None:  # say it in --gpus terms
            raise UsageError(
                f"--gpus {args.gpus}: {args.nodes} nodes of {args.gpus // args.nodes} "
                f"GPUs; the number of nodes {first.message[0].lower()}{first.message[1:]}"
            )
        raise UsageError(f"{flag}: {first.message}" if flag else str(first))
    request = plan_request(parse_job(_spec_from_flags(args)).spec)
    return dataclasses.replace(request, data=args.data, context=args.context, tensor=args.tensor)


def cmd_plan(args) -> int:
    import json
    from dataclasses import replace

    from .planner import against_bf16_json, format_against_bf16, format_table, plan, to_json
    from .planner.adaptive import adaptive_saving
    from .planner.report import adaptive_json, faster_layouts, format_adaptive, format_unplanned, unplanned_json
    from .resolve import plan_request

    where = f"{args.file}: " if args.file else "longctx: "
    try:
        if args.file:
            job = _job_from(args.file)
            _warn(args.file, job)
            if job.spec.on_cpu:  # a manual layout the planner does not model
                layout, _ = resolve_layout(job.spec)
                if args.output == "json":
                    print(json.dumps(unplanned_json(layout), indent=2))
                else:
                    print(format_unplanned(layout, job.spec.resources.nodes), end="")
                return 0
            request = plan_request(job.spec)
        else:
            if args.model is None or args.sequence_length is None:
                raise UsageError("plan needs a FILE, or --model and --sequence-length")
            if any(v is not None and not 1 <= v <= 65536 for v in (args.data, args.context, args.tensor)):
                raise UsageError("--data, --context and --tensor must be between 1 and 65536")
            request = _plan_request_from_flags(args)
        planned = plan(request)
    except PlanError as e:
        raise UsageError(f"{args.file}: {e}" if args.file else str(e)) from None
    if faster := faster_layouts(planned):
        pinned, unpin = (
            ("spec.parallelism", "parallelism.mode auto") if args.file else ("--data, --context, --tensor", "no pins")
        )
        print(
            f"{where}warning: {pinned}: the pinned layout {planned.chosen.layout} is slower than {faster[0].layout} "
            f"({planned.chosen.tokens_per_second:,.0f} vs {faster[0].tokens_per_second:,.0f} tokens/s estimated), "
            f"which fits; {unpin} would choose the fastest",
            file=sys.stderr,
        )
    fp8 = request.precision == "fp8"
    if fp8:
        try:
            bf16 = plan(replace(request, precision="bf16"))
        except PlanError:  # e.g. bf16 does not fit where fp8 does
            bf16 = None
    saving = adaptive_saving(planned)  # with data.packing.documentLengths only
    if args.output == "json":
        out = to_json(planned) | ({"againstBf16": against_bf16_json(planned, bf16)} if fp8 else {})
        print(json.dumps(out | ({"adaptive": adaptive_json(saving)} if saving else {}), indent=2))
    else:
        table = format_table(planned) + ("\n" + format_adaptive(saving) if saving else "")
        print(table + ("\n" + format_against_bf16(planned, bf16) if fp8 else ""))
    return 0


def _config(path: str | None):
    """The operator configuration of --config (defaults without one), as one-line errors."""
    from pydantic import ValidationError
    from yaml import YAMLError

    from .config import OperatorConfig

    try:
        return OperatorConfig.load(path)
    except OSError as e:
        raise UsageError(f"--config {path}: {e.strerror}") from None
    except YAMLError as e:
        raise UsageError(f"--config {path}: not YAML: {str(e).splitlines()[0]}") from None
    except ValidationError as e:
        raise UsageError(f"--config {path}: not a valid operator config: {_first_error(e)}") from None


def _first_error(error) -> str:
    """A pydantic ValidationError's first problem as `field.path: message` (one line)."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"])
    return f"{where}: {first['msg']}" if where else first["msg"]


MAX_GENERATION = 1_000_000  # workload names stay valid DNS labels (docs/operator.md)


def _positive_int(text: str) -> int:
    value = int(text)
    if not 1 <= value <= MAX_GENERATION:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_GENERATION}, got {value}")
    return value


def cmd_render(args) -> int:
    from pydantic import ValidationError

    from .api.spec import DNS_LABEL_PATTERN
    from .render import render_workload, render_yaml

    job = _job_from(args.file)
    _warn(args.file, job)
    if args.namespace:
        if not re.fullmatch(DNS_LABEL_PATTERN, args.namespace) or len(args.namespace) > 63:
            raise UsageError(f"--namespace {json.dumps(args.namespace)}: not a namespace name (a DNS label)")
        job.metadata.namespace = args.namespace
    config = _config(args.config)
    if args.image:
        try:
            config = type(config).model_validate({**config.model_dump(), "trainer_image": args.image})
        except ValidationError as e:
            raise UsageError(f"--image {json.dumps(args.image)}: {_first_error(e).split(': ', 1)[-1]}") from None
    try:
        layout, _ = resolve_layout(job.spec)
    except PlanError as e:
        raise UsageError(f"{args.file}: {e}") from None
    sys.stdout.write(render_yaml(render_workload(job, layout, args.generation, config).objects))
    return 0


def cmd_run(args) -> int:
    import shlex
    import time

    from .localrun import Interrupted, RunDirBusy, WorkerFailed, run, with_inputs_from
    from .planner import PlanError

    job = with_inputs_from(_job_from(args.file), Path(args.file).resolve().parent)
    run_dir = Path(args.run_dir or f".runs/{job.metadata.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    resume = shlex.join(["longctx", "run", args.file, "--run-dir", str(run_dir)])

    def say(text: str) -> None:
        try:
            print(f"longctx: {text}", file=sys.stderr, flush=True)
        except OSError:  # the terminal was closed (SIGHUP): the workers are stopped all the same
            pass

    def started(local) -> None:
        ports = local.metrics_ports
        wanted = job.spec.metrics.port
        say(
            f"running {job.metadata.name} locally: {job.spec.resources.nodes} workers, "
            f"metrics on ports {ports.start}-{ports.stop - 1}"
            + ("" if ports.start == wanted else f" (the manifest's {wanted} is in use)")
            + f", logs in {run_dir}"
        )
        say(f"stop with Ctrl-C; resume with: {resume}")

    try:
        code = run(job, run_dir.resolve(), started=started)
    except PlanError as e:
        raise UsageError(f"{args.file}: {e}") from None
    except RunDirBusy as e:
        raise UsageError(f"--run-dir {run_dir}: {e}") from None
    except OSError as e:
        raise UsageError(f"--run-dir {run_dir}: {e.strerror or e}") from None
    except WorkerFailed as e:
        raise UsageError(str(e)) from None
    except Interrupted as stop:
        local, last = stop.run, stop.run.last_checkpoint()
        checkpoint = job.spec.checkpoint.path
        where = checkpoint if is_url(checkpoint) or Path(checkpoint).is_absolute() else run_dir / checkpoint
        say(
            f"stopped at step {local.step}/{job.spec.steps}; "
            + (
                f"last checkpoint: step {last} in {where}"
                if last is not None
                else f"no checkpoint yet (one every {job.spec.checkpoint.interval_steps} steps, in {where})"
            )
        )
        say(f"resume with: {resume}")
        return 128 + stop.signum
    print(f"longctx: {job.metadata.name} finished", file=sys.stderr)
    return code


def cmd_export(args) -> int:
    """Runs the trainer's exporter in a child process (the operator side never imports JAX), in
    the run directory so that a relative checkpoint path resolves as it did for the workers."""
    import subprocess

    from .names import CONFIG_FILE

    run_dir = Path(args.run_dir)
    config = run_dir / CONFIG_FILE
    if not config.is_file():
        raise UsageError(f"{run_dir}: no {CONFIG_FILE}; expected the --run-dir of a `longctx run`")
    command = [
        sys.executable,
        "-m",
        "longctx_trainer.export",
        "--config",
        str(config.resolve()),
        "--output",
        str(Path(args.output).resolve()),
        "--dtype",
        args.dtype,
    ]
    if args.step is not None:
        command += ["--step", str(args.step)]
    if args.token_ids_from:
        command += ["--token-ids-from", str(Path(args.token_ids_from).resolve())]
    proc = subprocess.run(command, cwd=run_dir, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = proc.stderr.strip().splitlines() or [f"exit code {proc.returncode}"]
        raise UsageError(lines[-1].removeprefix("longctx_trainer.export: "))
    print(f"longctx: {proc.stdout.strip()}", file=sys.stderr)
    return 0


def cmd_tokenize(args) -> int:
    from longctx_trainer.tokenize import run  # numpy and tokenizers only, no JAX

    run(args, prefix="longctx")
    return 0


def cmd_operator(args) -> int:
    from pydantic import ValidationError

    from .main import config_from, run

    try:
        config = config_from(args, _config(args.config))
    except ValidationError as e:
        raise UsageError(f"operator: {_first_error(e)}") from None
    return run(config, args.verbose)


def build_parser() -> argparse.ArgumentParser:
    from .api.spec import ResourcesSpec

    parser = argparse.ArgumentParser(prog="longctx", description=__doc__.split("\n\n")[0].replace("\n", " "))
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("validate", help="check a LongContextJob manifest; each problem names its field")
    p.add_argument("file", help="manifest path, or - for stdin")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("plan", help="choose a (data, context, tensor) layout and explain it")
    p.add_argument("file", nargs="?", help="a LongContextJob manifest (or use the flags below)")
    p.add_argument("--model", help="model preset, e.g. llama3-8b")
    p.add_argument("--sequence-length", type=int)
    p.add_argument("--global-batch-tokens", type=int, help="default: one sequence")
    resources = {name: field.default for name, field in ResourcesSpec.model_fields.items()}
    p.add_argument("--nodes", type=int, help=f"spec.resources.nodes (default {resources['nodes']})")
    p.add_argument(
        "--gpus-per-node", type=int, help=f"spec.resources.gpusPerNode (default {resources['gpus_per_node']})"
    )
    p.add_argument("--gpu-type", help=f"spec.resources.gpuType (default {resources['gpu_type']}), e.g. h200-141gb")
    p.add_argument("--gpu", help=argparse.SUPPRESS)  # deprecated: --gpu-type
    p.add_argument("--gpus", type=int, help=argparse.SUPPRESS)  # deprecated: total GPUs; --nodes
    p.add_argument("--fabric", help="network fabric (default: the API's, tcp), e.g. infiniband")
    p.add_argument("--rack-nodes", type=int, help="spec.network.rack.nodes: nodes per rack (default: no racks)")
    p.add_argument(
        "--rack-oversubscription",
        type=float,
        help="spec.network.rack.oversubscription: 3 for 3:1 rack uplinks (default 1; needs --rack-nodes)",
    )
    p.add_argument("--precision", help="bf16 (the API's default), fp32 or fp8 (shown against bf16)")
    p.add_argument(
        "--attention",
        help="ring (the API's default), allGather, ulysses, hybrid, tokenRing or auto (the fastest that fits)",
    )
    p.add_argument("--ulysses", type=int, help="pin hybrid attention's Ulysses group size")
    p.add_argument("--data", type=int, help="pin data parallelism (the planner chooses the rest)")
    p.add_argument("--context", type=int, help="pin context parallelism")
    p.add_argument("--tensor", type=int, help="pin tensor parallelism")
    p.add_argument(
        "--offload",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="force host offload on or off (default: only when needed)",
    )
    p.add_argument("--chunk-tokens", type=int)
    p.add_argument("--memory", help="memory limit per pod, e.g. 1800Gi: offload must fit in it")
    p.add_argument("--output", "-o", default="text", choices=["text", "json"])
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("render", help="print the Kubernetes objects of a job (kubectl apply -f -)")
    p.add_argument("file", help="manifest path, or - for stdin")
    p.add_argument("--generation", type=_positive_int, default=1, help="workload generation (default 1)")
    p.add_argument("--namespace", "-n", help="namespace of the rendered objects")
    p.add_argument("--image", help="trainer image (default: the operator configuration's trainerImage)")
    p.add_argument("--config", metavar="FILE", help="operator configuration (the chart's operator.yaml)")
    p.set_defaults(func=cmd_render)

    from .localrun import HOST_ENV

    p = sub.add_parser(
        "run",
        help="train a job locally: its workers as local processes",
        description="Train a job locally: each pod's command as a local process with the pod's env "
        f"(spec.env included) and, from this shell's environment, only {', '.join(HOST_ENV)}. "
        "Ctrl-C stops it and prints the command that resumes it from the last checkpoint.",
    )
    p.add_argument("file", help="manifest path")
    p.add_argument(
        "--run-dir",
        help="directory for logs, config and relative checkpoint paths "
        "(default .runs/NAME-TIMESTAMP; reuse one to resume: logs are appended; one run at a time)",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("export", help="write a local run's checkpoint as a Hugging Face Llama model")
    p.add_argument("run_dir", help="the --run-dir of a `longctx run`")
    p.add_argument("--output", "-o", required=True, help="directory for config.json and *.safetensors")
    p.add_argument("--step", type=_positive_int, help="checkpoint step (default: the latest)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument(
        "--token-ids-from",
        metavar="DIR",
        help="Hugging Face checkpoint whose bos/eos/pad ids to keep (default: the job's initFrom)",
    )
    p.set_defaults(func=cmd_export)

    p = sub.add_parser("tokenize", help="text files -> a token file for data.kind tokens (Hugging Face tokenizer)")
    from longctx_trainer.tokenize import add_arguments as tokenize_arguments

    tokenize_arguments(p)
    p.set_defaults(func=cmd_tokenize)

    p = sub.add_parser("operator", help="run the operator (kopf) against the current kubeconfig or in-cluster")
    from .main import add_arguments

    add_arguments(p)
    p.set_defaults(func=cmd_operator)

    p = sub.add_parser("crd", help="print the CustomResourceDefinition generated from the API models")
    p.set_defaults(func=cmd_crd)

    from .jobctl import add_commands  # logs, status, list, wait, suspend, resume, delete (kubectl longctx)

    add_commands(sub)
    return parser


def main(argv: Sequence[str] | None = None, parser: argparse.ArgumentParser | None = None) -> int:
    args = (parser or build_parser()).parse_args(argv)
    try:
        return args.func(args)
    except UsageError as e:
        print(f"longctx: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `longctx plan ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
