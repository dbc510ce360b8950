"""What `longctx status`, `list`, `wait` and `logs` decide, as pure functions of the objects the API
server returned (plain dicts, read leniently: a status written by another operator version still
shows). The commands that fetch them are in jobctl.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import get_args

from longctx_trainer.contract.config import AUTO, DEFAULT_ATTENTION

from . import conditions, names
from .api.spec import API_ATTENTION
from .api.status import PENDING, TERMINAL, Phase
from .inplace_restarts import in_place_budget, shown_in_place_restarts
from .names import TRAINER_CONTAINER

PHASES: tuple[str, ...] = get_args(Phase)

_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


def parse_duration(text: str) -> float:
    """Seconds of a kubectl-style duration: "90", "90s", "10m", "1h30m"."""
    if text.isdigit():
        return float(text)
    match = _DURATION.fullmatch(text)
    if not text or not match:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 10m, 1h30m)")
    hours, minutes, seconds = (int(g or 0) for g in match.groups())
    return float(hours * 3600 + minutes * 60 + seconds)


def _status(job: dict) -> dict:
    return job.get("status") or {}


def phase_of(job: dict) -> str:
    return _status(job).get("phase") or PENDING


def _age(created: str | None, now: datetime) -> str:
    if not created:
        return "-"
    seconds = int((now - datetime.strptime(created, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{max(seconds, 0)}s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def layout_words(layout: dict) -> str:
    """The status.layout as words: "data 2 x context 4 x tensor 1"."""
    return " x ".join(f"{axis} {layout.get(axis, '?')}" for axis in ("data", "context", "tensor"))


def format_list(jobs: list[dict], now: datetime, all_namespaces: bool = False) -> str:
    """The `longctx list` table: one row per job."""
    header = ["NAME", "PHASE", "REASON", "DPxCPxTP", "ATTENTION", "STEP", "TOKENS/S", "ETA", "RESTARTS", "AGE"]
    if all_namespaces:
        header.insert(0, "NAMESPACE")
    rows = [header]
    for job in jobs:
        status, meta = _status(job), job.get("metadata") or {}
        layout, progress = status.get("layout") or {}, status.get("progress") or {}
        row = [
            meta.get("name", "?"),
            phase_of(job),
            status.get("reason") or "-",
            "x".join(str(layout.get(a, "?")) for a in ("data", "context", "tensor")) if layout else "-",
            layout.get("attention") or "-",
            str(progress["step"]) if progress.get("step") is not None else "-",
            _rate(progress.get("tokensPerSecond")),
            progress.get("eta") or "-",
            str(status.get("restarts", 0)),
            _age(meta.get("creationTimestamp"), now),
        ]
        if all_namespaces:
            row.insert(0, meta.get("namespace", "?"))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("   ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows)


def _attention_words(spec: dict, layout: dict) -> str:
    asked = (spec.get("parallelism") or {}).get("attention") or API_ATTENTION[DEFAULT_ATTENTION]
    kind = layout.get("attention") or asked
    if layout.get("ulysses"):
        kind += f" (Ulysses groups of {layout['ulysses']})"
    if asked == AUTO:
        return f"{kind}, chosen by the planner (parallelism.attention: auto)"
    return f"{kind} (parallelism.attention)"


def _load_balance_words(spec: dict, layout: dict) -> str:
    asked = (spec.get("parallelism") or {}).get("loadBalance") or AUTO
    if asked == AUTO:
        return f"{layout['loadBalance']}, chosen by auto (documents with data.packing.documentMask)"
    return f"{layout['loadBalance']} (parallelism.loadBalance)"


def _throughput(layout: dict, progress: dict) -> str | None:
    estimated, measured = layout.get("estimatedTokensPerSecond"), progress.get("tokensPerSecond")
    if estimated is None and measured is None:
        return None
    parts = [f"{_rate(measured)} measured" if measured is not None else "not measured yet"]
    if estimated is not None:
        parts.append(f"{_rate(estimated)} estimated by the planner")
        if measured is not None and estimated > 0:
            parts.append(f"measured/estimated {measured / estimated:.2f}")
    return ", ".join(parts)


def _in_place_text(status: dict, spec: dict) -> str:
    """The Generation line's in-place restarts (status.progress.inPlaceRestarts), where the status shows them."""
    if (count := shown_in_place_restarts(status)) is None:
        return ""
    return f", {count} in-place restarts in this generation of at most {in_place_budget(spec)}"


def format_status(job: dict) -> str:
    """`longctx status JOB`: phase, progress and why the layout is what it is, one fact a line."""
    meta, spec, status = job.get("metadata") or {}, job.get("spec") or {}, _status(job)
    layout, progress = status.get("layout") or {}, status.get("progress") or {}
    lines = [("Job", f"{meta.get('namespace', '?')}/{meta.get('name', '?')}")]
    phase = phase_of(job)
    why = status.get("reason")
    lines.append(("Phase", phase + (f" ({why}: {status['message']})" if why and status.get("message") else "")))
    generation = status.get("workloadGeneration")
    if generation:
        restarts = status.get("restarts", 0)
        limit = (spec.get("restartPolicy") or {}).get("maxRestarts")
        workload = status.get("currentWorkload") or "none (deleted)"
        lines.append(
            (
                "Generation",
                f"{generation} (Job {workload}), {restarts} gang restarts"
                + (f" of at most {limit}" if limit is not None else "")
                + _in_place_text(status, spec),
            )
        )
        lines.append(("Pods", f"-l {pod_selector(meta.get('name', '?'), generation)} (container {TRAINER_CONTAINER})"))
    workers = status.get("workers")
    if workers:
        lines.append(
            (
                "Workers",
                f"{workers.get('total', 0)} pods: {workers.get('ready', 0)} ready, "
                f"{workers.get('succeeded', 0)} succeeded, {workers.get('failed', 0)} failed",
            )
        )
    if progress.get("step") is not None:
        steps = spec.get("steps")
        text = f"step {progress['step']}" + (f" of {steps}" if steps else "")
        if progress.get("percentComplete") is not None:
            text += f" ({progress['percentComplete']}%)"
        if progress.get("loss") is not None:
            text += f", loss {progress['loss']:.4f}"
        if progress.get("mfu") is not None:
            text += f", MFU {100 * progress['mfu']:.1f}%"
        lines.append(("Progress", text))
    throughput = _throughput(layout, progress)
    if throughput:
        lines.append(("Tokens/s", throughput))
    if progress.get("eta"):
        done = progress.get("estimatedCompletionTime")
        lines.append(("ETA", progress["eta"] + (f" (finishes about {done})" if done else "")))
    if progress.get("lastCheckpointStep") is not None:
        lines.append(("Checkpoint", f"step {progress['lastCheckpointStep']}"))
    if layout:
        gpus = layout.get("data", 0) * layout.get("context", 0) * layout.get("tensor", 0)
        lines.append(("Layout", f"{layout_words(layout)} = {gpus} devices, {layout.get('processes', '?')} processes"))
        lines.append(("  why", layout.get("explanation") or "not recorded (written by an older operator)"))
        lines.append(("  attention", _attention_words(spec, layout)))
        if layout.get("loadBalance"):  # recorded since loadBalance auto
            lines.append(("  load balance", _load_balance_words(spec, layout)))
        offload = "on" + (f", chunks of {layout['chunkTokens']} tokens" if layout.get("chunkTokens") else "")
        lines.append(("  offload", offload if layout.get("offload") else "off"))
        if layout.get("memoryPerGpu"):
            lines.append(("  memory/GPU", f"{layout['memoryPerGpu']} planned"))
    else:
        planned = next((c for c in status.get("conditions") or [] if c.get("type") == conditions.LAYOUT_PLANNED), None)
        lines.append(("Layout", f"not planned: {planned.get('message')}" if planned else "not planned yet"))
    width = max(len(k) for k, _ in lines) + 2
    return "\n".join(f"{(key + ':').ljust(width)}{value}" for key, value in lines)


@dataclass(frozen=True)
class WaitVerdict:
    done: bool
    error: str | None = None  # the job can no longer reach the phase


def wait_verdict(job: dict, target: str) -> WaitVerdict:
    """Whether `wait --for target` is over: reached, or a terminal phase that is not it."""
    phase = phase_of(job)
    if phase == target:
        return WaitVerdict(True)
    if phase in TERMINAL:
        status = _status(job)
        why = f" ({status.get('reason')}: {status.get('message')})" if status.get("reason") else ""
        return WaitVerdict(True, f"{job['metadata']['name']} is {phase}{why}; it will never be {target}")
    return WaitVerdict(False)


def pod_rank(pod: dict) -> int | None:
    """A pod's node rank: the Indexed Job's completion index label."""
    value = ((pod.get("metadata") or {}).get("labels") or {}).get(names.COMPLETION_INDEX_LABEL)
    return int(value) if value is not None and value.isdigit() else None


def pod_selector(job_name: str, generation: int) -> str:
    """The label selector of one generation's pods (what `kubectl logs -l` takes)."""
    return f"{names.JOB_NAME_LABEL}={job_name},{names.GENERATION_LABEL}={generation}"


def log_generation(job: dict, previous: bool) -> int | None:
    """The generation whose pods `logs` reads: the status's current one, or the one before it."""
    generation = _status(job).get("workloadGeneration")
    if generation is None:
        return None
    return generation - 1 if previous else generation


def select_pods(pods: list[dict], ranks: list[int] | None) -> list[tuple[int, dict]]:
    """(rank, pod) of the pods to read, by rank; `ranks` None means every rank. Of two pods with
    one rank (a replaced pod still terminating), the newest."""
    by_rank: dict[int, dict] = {}
    for pod in pods:
        rank = pod_rank(pod)
        if rank is None or (ranks is not None and rank not in ranks):
            continue
        created = pod["metadata"].get("creationTimestamp") or ""
        if rank not in by_rank or created >= (by_rank[rank]["metadata"].get("creationTimestamp") or ""):
            by_rank[rank] = pod
    return sorted(by_rank.items(), key=lambda item: item[0])


def container_started(pod: dict, container: str) -> bool:
    """True once the container runs or ran (its logs can be read)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            state = status.get("state") or {}
            return "running" in state or "terminated" in state
    return False
