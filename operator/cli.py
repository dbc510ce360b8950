"""`longctx`: validate, plan, render, run and export LongContextJobs; tokenize text; print the CRD;
run the operator.

Every failure a user can cause ends with one readable line on stderr and a non-zero exit, never a
traceback.
"""

from __future__ import annotations

import argparse
import os
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
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a text file (UTF-8 expected)") from None
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
    _warn(args.file, parse_job(manifest))
    print(f"{args.file}: valid")
    return 0


def _warn(path: str, job) -> None:
    """Prints what in a valid job is likely a mistake on Kubernetes (api/advice.py)."""
    from .api.advice import advice

    for warning in advice(job.spec):
        print(f"{path}: {warning}", file=sys.stderr)


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


def _plan_request_from_flags(args):
    from longctx_trainer.presets import PRESETS

    from .api.quantity import parse_quantity
    from .planner import PlanRequest
    from .render.trainer_config import ATTENTION

    if args.model not in PRESETS:
        raise UsageError(f"--model: unknown preset {args.model!r}; known: {', '.join(PRESETS)}")
    if args.gpus < 1 or args.gpus_per_node < 1:
        raise UsageError("--gpus and --gpus-per-node must be at least 1")
    if args.gpus % args.gpus_per_node:
        raise UsageError(f"--gpus {args.gpus} is not a multiple of --gpus-per-node {args.gpus_per_node}")
    try:
        host_memory = parse_quantity(args.memory) if args.memory else None
    except ValueError as e:
        raise UsageError(f"--memory: {e} (e.g. 1800Gi)") from None
    return PlanRequest(
        model=PRESETS[args.model], sequence_length=args.sequence_length,
        global_batch_tokens=args.global_batch_tokens or args.sequence_length,
        nodes=args.gpus // args.gpus_per_node, gpus_per_node=args.gpus_per_node, gpu=args.gpu,
        fabric=args.fabric, precision=args.precision, data=args.data, context=args.context,
        tensor=args.tensor, attention=ATTENTION[args.attention],
        offload=args.offload, chunk_tokens=args.chunk_tokens, host_memory_bytes=host_memory)


def cmd_plan(args) -> int:
    import json

    from .planner import PlanError, format_table, plan, to_json
    from .resolve import plan_request

    try:
        if args.file:
            job = _job_from(args.file)
            _warn(args.file, job)
            if job.spec.resources.gpu_type == "cpu":
                raise UsageError(f"{args.file}: gpuType cpu has a manual layout; nothing to plan")
            request = plan_request(job.spec)
        else:
            if args.model is None or args.sequence_length is None:
                raise UsageError("plan needs a FILE, or --model and --sequence-length")
            request = _plan_request_from_flags(args)
        chosen = plan(request)
    except PlanError as e:
        raise UsageError(str(e)) from None
    if args.output == "json":
        print(json.dumps(to_json(chosen), indent=2))
    else:
        print(format_table(chosen))
    return 0


def _settings():
    """Operator settings from LONGCTX_OPERATOR_CONFIG and the environment, as one-line errors."""
    from pydantic import ValidationError

    from .render import OperatorSettings

    try:
        return OperatorSettings.from_env()
    except OSError as e:
        raise UsageError(f"LONGCTX_OPERATOR_CONFIG {e.filename}: {e.strerror}") from None
    except (yaml.YAMLError, ValidationError) as e:
        raise UsageError(f"LONGCTX_OPERATOR_CONFIG: not a valid operator config: "
                         f"{str(e).splitlines()[0]}") from None


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def cmd_render(args) -> int:
    from .planner import PlanError
    from .render import render_workload, render_yaml
    from .resolve import resolve_layout

    job = _job_from(args.file)
    _warn(args.file, job)
    if args.namespace:
        job.metadata.namespace = args.namespace
    settings = _settings()
    if args.image:
        settings = settings.model_copy(update={"trainer_image": args.image})
    try:
        layout, _ = resolve_layout(job.spec)
    except PlanError as e:
        raise UsageError(f"{args.file}: {e}") from None
    sys.stdout.write(render_yaml(render_workload(job, layout, args.generation, settings)))
    return 0


def cmd_run(args) -> int:
    import time

    from .localrun import WorkerFailed, run
    from .planner import PlanError

    job = _job_from(args.file)
    run_dir = Path(args.run_dir or f".runs/{job.metadata.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"longctx: running {job.metadata.name} locally: {job.spec.resources.nodes} workers, "
          f"logs in {run_dir}", file=sys.stderr)
    try:
        code = run(job, run_dir.resolve())
    except PlanError as e:
        raise UsageError(f"{args.file}: {e}") from None
    except OSError as e:
        raise UsageError(f"--run-dir {run_dir}: {e.strerror or e}") from None
    except WorkerFailed as e:
        raise UsageError(str(e)) from None
    print(f"longctx: {job.metadata.name} finished", file=sys.stderr)
    return code


def cmd_export(args) -> int:
    """Runs the trainer's exporter in a child process (the operator side never imports JAX), in
    the run directory so that a relative checkpoint path resolves as it did for the workers."""
    import subprocess

    from .render.names import CONFIG_FILE

    run_dir = Path(args.run_dir)
    config = run_dir / CONFIG_FILE
    if not config.is_file():
        raise UsageError(f"{run_dir}: no {CONFIG_FILE}; expected the --run-dir of a `longctx run`")
    command = [sys.executable, "-m", "longctx_trainer.export", "--config", str(config.resolve()),
               "--output", str(Path(args.output).resolve()), "--dtype", args.dtype]
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
    from .main import run

    return run(args)


def build_parser() -> argparse.ArgumentParser:
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
    p.add_argument("--gpus", type=int, default=8, help="total GPUs (default 8)")
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gpu", default="h100-80gb", help="GPU type, e.g. h100-80gb, h200-141gb")
    p.add_argument("--fabric", default="infiniband")
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--attention", default="ring", choices=["ring", "allGather"])
    p.add_argument("--data", type=int, help="pin data parallelism (the planner chooses the rest)")
    p.add_argument("--context", type=int, help="pin context parallelism")
    p.add_argument("--tensor", type=int, help="pin tensor parallelism")
    p.add_argument("--offload", action=argparse.BooleanOptionalAction, default=None,
                   help="force host offload on or off (default: only when needed)")
    p.add_argument("--chunk-tokens", type=int)
    p.add_argument("--memory", help="memory limit per pod, e.g. 1800Gi: offload must fit in it")
    p.add_argument("--output", "-o", default="text", choices=["text", "json"])
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("render", help="print the Kubernetes objects of a job (kubectl apply -f -)")
    p.add_argument("file", help="manifest path, or - for stdin")
    p.add_argument("--generation", type=_positive_int, default=1, help="workload generation (default 1)")
    p.add_argument("--namespace", "-n", help="namespace of the rendered objects")
    p.add_argument("--image", help="trainer image (default: the operator's LONGCTX_TRAINER_IMAGE)")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("run", help="train a job locally: its workers as local processes")
    p.add_argument("file", help="manifest path")
    p.add_argument("--run-dir", help="directory for logs, config and relative checkpoint paths "
                                     "(default .runs/NAME-TIMESTAMP; reuse one to resume)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("export", help="write a local run's checkpoint as a Hugging Face Llama model")
    p.add_argument("run_dir", help="the --run-dir of a `longctx run`")
    p.add_argument("--output", "-o", required=True, help="directory for config.json and *.safetensors")
    p.add_argument("--step", type=_positive_int, help="checkpoint step (default: the latest)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--token-ids-from", metavar="DIR",
                   help="Hugging Face checkpoint whose bos/eos/pad ids to keep (default: the job's initFrom)")
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
    except BrokenPipeError:  # e.g. `longctx plan ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
