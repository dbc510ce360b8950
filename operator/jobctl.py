"""Running LongContextJobs from the command line: `logs`, `status`, `list`, `wait`, `suspend`,
`resume` and `delete`, as `longctx` subcommands and as the kubectl plugin `kubectl-longctx` (the
same parser and code; `kubectl longctx logs JOB -f`).

Each command talks to the API server with the kubernetes client, like kubectl: `--kubeconfig`
(else $KUBECONFIG, else ~/.kube/config, else in-cluster credentials), `--context` and
`-n/--namespace` (default: the context's namespace). Every failure is one line on stderr and
exit 1 (cli.main). What the commands decide from the objects they read is in jobview.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import urllib3
from kubernetes.client.exceptions import ApiException

from . import jobview
from .api.status import FAILED, TERMINAL
from .cli import UsageError
from .names import GROUP, PLURAL, TRAINER_CONTAINER, VERSION, workload_name
from .observe import controller_of

REQUEST_TIMEOUT = (10, 60)
"""(connect, read) seconds of every request but a followed log stream (read: no limit)."""
POLL_SECONDS = 1.0
"""How often `wait` and `logs -f` read the job again."""
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass
class Cluster:
    """The API clients and the namespace a command works in."""

    api: kubernetes.client.ApiClient
    namespace: str

    @property
    def core(self) -> kubernetes.client.CoreV1Api:
        return kubernetes.client.CoreV1Api(self.api)

    @property
    def batch(self) -> kubernetes.client.BatchV1Api:
        return kubernetes.client.BatchV1Api(self.api)

    @property
    def custom(self) -> kubernetes.client.CustomObjectsApi:
        return kubernetes.client.CustomObjectsApi(self.api)


def _kubeconfig_exists(path: str | None) -> bool:
    paths = (path or os.environ.get("KUBECONFIG") or "~/.kube/config").split(os.pathsep)
    return any(Path(p).expanduser().is_file() for p in paths if p)


def connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Cluster:
    """Credentials and namespace as kubectl finds them; UsageError when there are none."""
    config = kubernetes.client.Configuration()
    if not kubeconfig and not context and not _kubeconfig_exists(None) and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kubernetes.config.load_incluster_config(client_configuration=config)
        default = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if SERVICE_ACCOUNT_NAMESPACE.is_file() else "default"
        return Cluster(kubernetes.client.ApiClient(config), namespace or default)
    if not _kubeconfig_exists(kubeconfig):
        where = f"--kubeconfig {kubeconfig}" if kubeconfig else "$KUBECONFIG or ~/.kube/config"
        raise UsageError(f"no cluster: {where} is not a file (pass --kubeconfig, or set KUBECONFIG)")
    try:
        contexts, current = kubernetes.config.list_kube_config_contexts(config_file=kubeconfig)
        chosen = next((c for c in contexts if c["name"] == context), None) if context else current
        if chosen is None:
            raise UsageError(
                f"--context {context}: not in the kubeconfig (it has {', '.join(c['name'] for c in contexts)})"
                if context
                else "the kubeconfig has no current context: pass --context"
            )
        kubernetes.config.load_kube_config(
            config_file=kubeconfig, context=chosen["name"], client_configuration=config, persist_config=False
        )
    except (kubernetes.config.ConfigException, OSError) as e:
        raise UsageError(f"kubeconfig: {e}") from None
    default = (chosen.get("context") or {}).get("namespace") or "default"
    return Cluster(kubernetes.client.ApiClient(config), namespace or default)


def _api_message(e: ApiException) -> str:
    """The API server's message (its Status object), on one line."""
    try:
        message = json.loads(e.body)["message"]
    except (TypeError, ValueError, KeyError):
        message = f"{e.status} {e.reason}"
    return " ".join(str(message).split())


@contextmanager
def _translated(cluster: Cluster, job: str | None) -> Iterator[None]:
    """The API server's and the network's errors as one line each."""
    try:
        yield
    except ApiException as e:
        if e.status == 0:  # the client's own failure, e.g. TLS
            reason = " ".join(str(e.reason).split())
            raise UsageError(f"cannot reach the API server {cluster.api.configuration.host}: {reason}") from None
        try:
            details = json.loads(e.body).get("details") or {}
        except (TypeError, ValueError, AttributeError):
            details = {}
        if e.status == 404 and details.get("kind") == PLURAL and job:
            raise UsageError(f"longcontextjob {job} not found in namespace {cluster.namespace}") from None
        if e.status == 404 and not details:
            raise UsageError(
                f"the cluster has no {PLURAL}.{GROUP} API: install the chart (or `longctx crd | kubectl apply -f -`)"
            ) from None
        raise UsageError(_api_message(e)) from None
    except urllib3.exceptions.HTTPError as e:
        reason = " ".join(str(getattr(e, "reason", None) or e).split())
        raise UsageError(f"cannot reach the API server {cluster.api.configuration.host}: {reason}") from None


def _json(response) -> dict:
    return json.loads(response.data)


def read_job(cluster: Cluster, name: str) -> dict:
    return _json(
        cluster.custom.get_namespaced_custom_object(
            GROUP, VERSION, cluster.namespace, PLURAL, name, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
        )
    )


def _gang_pods(cluster: Cluster, job: dict, generation: int) -> list[dict]:
    """The pods of the job's generation: those its own Job controls (the Job's controller being this
    LongContextJob, by uid), never pods that merely carry the job's labels."""
    name = job["metadata"]["name"]
    try:
        batch = _json(
            cluster.batch.read_namespaced_job(
                workload_name(name, generation),
                cluster.namespace,
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT,
            )
        )
    except ApiException as e:
        if e.status == 404:
            return []
        raise
    if (controller_of(batch) or {}).get("uid") != job["metadata"].get("uid"):
        return []
    pods = _json(
        cluster.core.list_namespaced_pod(
            cluster.namespace,
            label_selector=jobview.pod_selector(name, generation),
            _preload_content=False,
            _request_timeout=REQUEST_TIMEOUT,
        )
    )["items"]
    return [p for p in pods if (controller_of(p) or {}).get("uid") == batch["metadata"]["uid"]]


def _say(message: str) -> None:
    print(f"longctx: {message}", file=sys.stderr, flush=True)


def cmd_list(args, cluster: Cluster) -> int:
    if args.all_namespaces:
        items = _json(
            cluster.custom.list_cluster_custom_object(
                GROUP, VERSION, PLURAL, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        )["items"]
    else:
        items = _json(
            cluster.custom.list_namespaced_custom_object(
                GROUP, VERSION, cluster.namespace, PLURAL, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
            )
        )["items"]
    if not items:
        _say("no longcontextjobs" + ("" if args.all_namespaces else f" in namespace {cluster.namespace}"))
        return 0
    print(jobview.format_list(items, datetime.now(UTC), args.all_namespaces))
    return 0


def cmd_status(args, cluster: Cluster) -> int:
    print(jobview.format_status(read_job(cluster, args.job)))
    return 0


def _set_suspend(cluster: Cluster, name: str, suspend: bool) -> int:
    job = read_job(cluster, name)
    phase = jobview.phase_of(job)
    verb = "suspend" if suspend else "resume"
    if phase in TERMINAL:
        raise UsageError(f"{name} is {phase}: a finished job cannot be {verb}d")
    if bool((job.get("spec") or {}).get("suspend")) == suspend:
        print(f"longcontextjob {name} is {'already' if suspend else 'not'} suspended")
        return 0
    cluster.custom.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        cluster.namespace,
        PLURAL,
        name,
        {"spec": {"suspend": suspend}},
        _content_type="application/merge-patch+json",
        _preload_content=False,
        _request_timeout=REQUEST_TIMEOUT,
    )
    if suspend:
        print(f"longcontextjob {name} suspended: its pods are deleted; resume continues from the last checkpoint")
    else:
        print(f"longcontextjob {name} resumed: the next generation starts from the last checkpoint")
    return 0


def cmd_suspend(args, cluster: Cluster) -> int:
    return _set_suspend(cluster, args.job, True)


def cmd_resume(args, cluster: Cluster) -> int:
    return _set_suspend(cluster, args.job, False)


def _until(check: Callable[[], bool], timeout: float | None, on_timeout: Callable[[], str]) -> None:
    deadline = None if not timeout else time.monotonic() + timeout
    while not check():
        if deadline is not None and time.monotonic() >= deadline:
            raise UsageError(on_timeout())
        time.sleep(POLL_SECONDS if deadline is None else max(0.0, min(POLL_SECONDS, deadline - time.monotonic())))


def cmd_delete(args, cluster: Cluster) -> int:
    cluster.custom.delete_namespaced_custom_object(
        GROUP, VERSION, cluster.namespace, PLURAL, args.job, _preload_content=False, _request_timeout=REQUEST_TIMEOUT
    )
    if args.wait:

        def gone() -> bool:
            try:
                read_job(cluster, args.job)
            except ApiException as e:
                if e.status == 404:
                    return True
                raise
            return False

        _until(gone, args.timeout, lambda: f"timed out after {args.timeout:g}s: {args.job} is still being deleted")
    print(f"longcontextjob {args.job} deleted (its Service, ConfigMap, Job and pods go with it)")
    return 0


def cmd_wait(args, cluster: Cluster) -> int:
    last: dict = {}

    def reached() -> bool:
        try:
            last["job"] = read_job(cluster, args.job)
        except ApiException as e:
            if e.status == 404 and last:
                raise UsageError(f"{args.job} was deleted while waiting for {args.phase}") from None
            raise
        verdict = jobview.wait_verdict(last["job"], args.phase)
        if verdict.error:
            raise UsageError(verdict.error)
        return verdict.done

    def timed_out() -> str:
        status = last["job"].get("status") or {}
        why = f" ({status['reason']}: {status.get('message')})" if status.get("reason") else ""
        return f"timed out after {args.timeout:g}s: {args.job} is {jobview.phase_of(last['job'])}{why}"

    _until(reached, args.timeout, timed_out)
    print(f"longcontextjob {args.job} is {args.phase}")
    return 0


class _LinePrinter:
    """Writes whole lines from several pods' streams to stdout, each prefixed with its rank when
    there are several."""

    def __init__(self, prefix: bool):
        self.prefix, self.lock, self.errors = prefix, threading.Lock(), []

    def write(self, rank: int, line: bytes) -> None:
        with self.lock:
            sys.stdout.buffer.write((f"[rank {rank}] ".encode() if self.prefix else b"") + line)
            sys.stdout.buffer.flush()

    def copy(self, response, rank: int) -> None:
        rest = b""
        for chunk in response.stream(65536):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                self.write(rank, line + b"\n")
        if rest:
            self.write(rank, rest + b"\n")


def _read_log(cluster: Cluster, pod: dict, follow: bool, tail: int | None):
    return cluster.core.read_namespaced_pod_log(
        pod["metadata"]["name"],
        cluster.namespace,
        container=TRAINER_CONTAINER,
        follow=follow,
        tail_lines=tail,
        _preload_content=False,
        _request_timeout=None if follow else REQUEST_TIMEOUT,  # a quiet trainer is not a failure
    )


def _ranks(args, job: dict) -> list[int] | None:
    nodes = ((job.get("spec") or {}).get("resources") or {}).get("nodes", 1)
    if args.all_ranks:
        return None
    if not 0 <= args.rank < nodes:
        raise UsageError(f"--rank {args.rank}: {args.job} has {nodes} ranks (0 to {nodes - 1})")
    return [args.rank]


def _print_logs(args, cluster: Cluster, job: dict) -> int:
    generation = jobview.log_generation(job, args.previous)
    if not generation:
        phase = jobview.phase_of(job)
        if args.previous:
            raise UsageError(f"{args.job} has no previous generation")
        raise UsageError(f"{args.job} has no pods yet (phase {phase})")
    chosen = jobview.select_pods(_gang_pods(cluster, job, generation), _ranks(args, job))
    if not chosen:
        raise UsageError(
            f"{args.job} has no pods of generation {generation}"
            + (" (the operator deletes a generation's pods when it restarts or ends the gang)" if args.previous else "")
        )
    printer = _LinePrinter(prefix=args.all_ranks)
    for rank, pod in chosen:
        if not jobview.container_started(pod, TRAINER_CONTAINER):
            if not args.all_ranks:
                raise UsageError(f"rank {rank}'s pod {pod['metadata']['name']} has not started yet")
            _say(f"rank {rank}'s pod {pod['metadata']['name']} has not started yet")
            continue
        printer.copy(_read_log(cluster, pod, False, args.tail), rank)
    return 0


def _follow(args, cluster: Cluster, job: dict) -> int:
    """Follows the pods of the job's current generation and, when the gang restarts, the next
    generation's, until the job ends."""
    ranks = _ranks(args, job)
    printer = _LinePrinter(prefix=args.all_ranks)
    streamed: set[str] = set()
    streams: list[threading.Thread] = []
    generation, note = None, None

    def stream(pod: dict, rank: int) -> None:
        try:
            printer.copy(_read_log(cluster, pod, True, args.tail), rank)
        except Exception as e:  # a thread's end: any failure is one line, never a traceback
            reason = _api_message(e) if isinstance(e, ApiException) else getattr(e, "reason", None) or e
            _say(f"rank {rank} ({pod['metadata']['name']}): {' '.join(str(reason).split())}")

    while True:
        current = jobview.log_generation(job, False)
        if current != generation and current:
            if generation is not None:
                _say(f"{args.job}: generation {current} started (gang restart or resume); following its pods")
            generation = current
        phase = jobview.phase_of(job)
        chosen = jobview.select_pods(_gang_pods(cluster, job, generation), ranks) if generation else []
        waiting = []
        for rank, pod in chosen:
            uid = pod["metadata"]["uid"]
            if uid in streamed:
                continue
            if jobview.container_started(pod, TRAINER_CONTAINER):
                streamed.add(uid)
                thread = threading.Thread(target=stream, args=(pod, rank), daemon=True)
                thread.start()
                streams.append(thread)
            else:
                waiting.append(rank)
        streams = [t for t in streams if t.is_alive()]
        if phase in TERMINAL and not streams and not waiting:
            status = job.get("status") or {}
            if phase == FAILED:
                raise UsageError(f"{args.job} is Failed ({status.get('reason')}: {status.get('message')})")
            _say(f"{args.job} is {phase}")
            return 0
        if not streams and (not chosen or waiting):
            message = (job.get("status") or {}).get("message")
            now = f"waiting for the pods of {args.job} (phase {phase}" + (f": {message})" if message else ")")
            if now != note:
                _say(now)
                note = now
        time.sleep(POLL_SECONDS)
        job = read_job(cluster, args.job)


def cmd_logs(args, cluster: Cluster) -> int:
    if args.follow and args.previous:
        raise UsageError("--previous and --follow cannot be combined: the previous generation has ended")
    job = read_job(cluster, args.job)
    return _follow(args, cluster, job) if args.follow else _print_logs(args, cluster, job)


def _timeout(text: str) -> float:
    try:
        return jobview.parse_duration(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _phase(text: str) -> str:
    match = next((p for p in jobview.PHASES if p.lower() == text.lower()), None)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a phase (one of {', '.join(jobview.PHASES)})")
    return match


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _connection_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--context", help="kubeconfig context (default: the current one)")
    p.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")


def _runs(command: Callable[[argparse.Namespace, Cluster], int]) -> Callable[[argparse.Namespace], int]:
    def run(args) -> int:
        cluster = connect(args.kubeconfig, args.context, args.namespace)
        with _translated(cluster, getattr(args, "job", None)):
            return command(args, cluster)

    return run


def add_commands(sub) -> None:
    """Registers the job commands on an argparse subparsers object (`longctx` and the plugin)."""
    p = sub.add_parser("list", help="the LongContextJobs of a namespace: phase, layout, step, tokens/s")
    p.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    _connection_arguments(p)
    p.set_defaults(func=_runs(cmd_list))

    p = sub.add_parser("status", help="a job's phase, progress, tokens/s and why its layout was chosen")
    p.add_argument("job", help="LongContextJob name")
    _connection_arguments(p)
    p.set_defaults(func=_runs(cmd_status))

    p = sub.add_parser("logs", help="a job's trainer logs, following it across gang restarts with -f")
    p.add_argument("job", help="LongContextJob name")
    p.add_argument("-f", "--follow", action="store_true", help="stream, and follow the next generation's pods")
    ranks = p.add_mutually_exclusive_group()
    ranks.add_argument("--rank", type=_non_negative, default=0, help="node rank: the pod of this index (default 0)")
    ranks.add_argument("--all-ranks", action="store_true", help="every rank, each line prefixed [rank N]")
    p.add_argument("--previous", action="store_true", help="the previous generation's pods, while they still exist")
    p.add_argument("--tail", type=_non_negative, help="only the last N lines of each pod")
    _connection_arguments(p)
    p.set_defaults(func=_runs(cmd_logs))

    p = sub.add_parser("wait", help="wait until a job reaches a phase; fails if it ends in another")
    p.add_argument("job", help="LongContextJob name")
    p.add_argument("--for", dest="phase", type=_phase, required=True, help=f"phase: {', '.join(jobview.PHASES)}")
    p.add_argument("--timeout", type=_timeout, default=600.0, help="e.g. 90s, 10m, 2h (default 10m; 0: no limit)")
    _connection_arguments(p)
    p.set_defaults(func=_runs(cmd_wait))

    for name, command, text in (
        ("suspend", cmd_suspend, "suspend a job (spec.suspend): its pods are deleted, its checkpoint stays"),
        ("resume", cmd_resume, "resume a suspended job from its last checkpoint"),
    ):
        p = sub.add_parser(name, help=text)
        p.add_argument("job", help="LongContextJob name")
        _connection_arguments(p)
        p.set_defaults(func=_runs(command))

    p = sub.add_parser("delete", help="delete a job and every object it owns")
    p.add_argument("job", help="LongContextJob name")
    p.add_argument("--wait", action="store_true", help="return once the job is gone")
    p.add_argument("--timeout", type=_timeout, default=120.0, help="with --wait (default 2m)")
    _connection_arguments(p)
    p.set_defaults(func=_runs(cmd_delete))


def build_parser() -> argparse.ArgumentParser:
    """The kubectl plugin's parser: only the job commands."""
    parser = argparse.ArgumentParser(
        prog="kubectl longctx", description="Follow, inspect and control LongContextJobs (longctx's kubectl plugin)."
    )
    add_commands(parser.add_subparsers(dest="command", required=True, metavar="COMMAND"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """`kubectl-longctx`: the job commands with `longctx`'s one-line errors."""
    from .cli import main as cli_main

    return cli_main(argv, build_parser())


if __name__ == "__main__":
    sys.exit(main())
