"""Generate the longctx Grafana dashboard with Grafana's typed grafana-foundation-sdk.

Run from the repository root: `python -m dashboards.build` (or `python dashboards/build.py`).
It writes dashboards/longctx.json and the Helm chart's copy; `--check` only compares and exits 1
when either file is stale. All queries select on the template variables $namespace and $job;
GPU panels join DCGM exporter series to trainer pods on (namespace, pod) through
longctx_train_build_info, so only GPUs of the selected jobs are shown.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model

ROOT = Path(__file__).resolve().parent.parent
OUTPUTS = (ROOT / "dashboards" / "longctx.json", ROOT / "charts" / "longctx" / "dashboards" / "longctx.json")

DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
JOB = 'namespace=~"$namespace", job_name=~"$job"'
RATE = "$__rate_interval"
# One row per trainer pod of the selected jobs, value 1: multiply a per-pod series by it to keep
# only the selected jobs' pods and to gain their job_name label.
TRAINER_PODS = f"max by (namespace, pod, job_name) (longctx_train_build_info{{{JOB}}})"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    unit: str
    queries: tuple[Query, ...]
    kind: str = "timeseries"  # or "stat"
    width: int = 12


def on_trainer_pods(dcgm_metric: str, aggregate: str = "avg") -> str:
    """A DCGM per-GPU series restricted to the selected jobs' trainer pods, one line per GPU."""
    return (
        f"{aggregate} by (namespace, pod, gpu) ({dcgm_metric})\n"
        f"  * on (namespace, pod) group_left (job_name) {TRAINER_PODS}"
    )


def step_quantile(q: float, by: str) -> str:
    return (
        f"histogram_quantile({q}, sum by (le, {by}) "
        f"(rate(longctx_train_step_duration_seconds_bucket{{{JOB}}}[{RATE}])))"
    )


TRAINING = (
    PanelSpec(
        "Job throughput (tokens/s)",
        "Tokens per second of each job. Every rank counts the job's global tokens, so the job's "
        "rate is that of its fastest-reporting rank (max), not the sum over ranks.",
        "short",
        (Query(f"max by (namespace, job_name) (rate(longctx_train_tokens_total{{{JOB}}}[{RATE}]))", "{{job_name}}"),),
    ),
    PanelSpec(
        "Tokens/s per rank (stragglers)",
        "Each rank's own rate; in synchronous training they move together, so a rank that lags "
        "or whose line stops is a straggler or a hung process.",
        "short",
        (Query(f"rate(longctx_train_tokens_total{{{JOB}}}[{RATE}])", "{{job_name}} rank {{rank}}"),),
    ),
    PanelSpec(
        "Step time p50 / p95",
        "Quantiles of the training step duration over all ranks of each job.",
        "s",
        (
            Query(step_quantile(0.5, "namespace, job_name"), "{{job_name}} p50"),
            Query(step_quantile(0.95, "namespace, job_name"), "{{job_name}} p95"),
        ),
    ),
    PanelSpec(
        "Step time p95 per rank",
        "The slowest rank sets the pace of the whole gang: a rank whose p95 stands out is the straggler.",
        "s",
        (Query(step_quantile(0.95, "namespace, job_name, rank"), "{{job_name}} rank {{rank}}"),),
    ),
    PanelSpec(
        "Last step time / gang median, per rank",
        "Each rank's last step time over its gang's median (longctx_train_last_step_seconds): the "
        "operator flags a rank above 1 + stragglerDetection.slowerPercent for the window (the "
        "Straggler condition, the LongctxStraggler alert at 1.5).",
        "none",
        (
            Query(
                f"longctx_train_last_step_seconds{{{JOB}}} / on (namespace, job_name) group_left () "
                f"quantile by (namespace, job_name) (0.5, longctx_train_last_step_seconds{{{JOB}}})",
                "{{job_name}} rank {{rank}}",
            ),
        ),
    ),
    PanelSpec(
        "Compute probe / gang median, per rank",
        "Each rank's compute probe time over its gang's median (longctx_train_probe_seconds: fixed work "
        "with no collective, so a rank whose device is slow stands out where the step times, "
        "equalised by the collectives, do not). The operator compares these when every rank serves "
        "one (the Straggler condition, the LongctxStraggler alert at 1.5).",
        "none",
        (
            Query(
                f"longctx_train_probe_seconds{{{JOB}}} / on (namespace, job_name) group_left () "
                f"quantile by (namespace, job_name) (0.5, longctx_train_probe_seconds{{{JOB}}})",
                "{{job_name}} rank {{rank}}",
            ),
        ),
    ),
    PanelSpec(
        "Data time above the gang median / step, per rank",
        "How much longer each rank takes for a batch's data than its gang's median, as a share of the "
        "gang's median step (longctx_train_data_seconds: a rank with slow input holds every rank at "
        "the next collective). The operator flags a rank above stragglerDetection.slowerPercent for "
        "the window (the Straggler condition, the LongctxSlowInput alert at 0.5).",
        "percentunit",
        (
            Query(
                f"(longctx_train_data_seconds{{{JOB}}} - on (namespace, job_name) group_left () "
                f"quantile by (namespace, job_name) (0.5, longctx_train_data_seconds{{{JOB}}})) "
                f"/ on (namespace, job_name) group_left () "
                f"quantile by (namespace, job_name) (0.5, longctx_train_last_step_seconds{{{JOB}}})",
                "{{job_name}} rank {{rank}}",
            ),
        ),
    ),
    PanelSpec(
        "Link probe / gang median, per rank",
        "Each rank's link probe time over its gang's median (longctx_train_link_probe_seconds: the "
        "fastest of its pairwise exchanges with other nodes, so a rank whose node's network link is "
        "slow stands out where the step times and compute probes do not; gangs of three nodes or "
        "more). The operator compares these when every rank serves one (the Straggler condition, the "
        "LongctxSlowLink alert at 1.5).",
        "none",
        (
            Query(
                f"longctx_train_link_probe_seconds{{{JOB}}} / on (namespace, job_name) group_left () "
                f"quantile by (namespace, job_name) (0.5, longctx_train_link_probe_seconds{{{JOB}}})",
                "{{job_name}} rank {{rank}}",
            ),
        ),
    ),
    PanelSpec(
        "Seconds since each rank's heartbeat",
        "How long each rank has not changed phase or finished a step (hang detection reads the same "
        "heartbeat; a stopped process stops being scraped, so its line ends).",
        "s",
        (Query(f"time() - longctx_train_heartbeat_timestamp_seconds{{{JOB}}}", "{{job_name}} rank {{rank}}"),),
    ),
    PanelSpec(
        "Loss",
        "Training loss (the same value on every rank; averaged over ranks).",
        "none",
        (Query(f"avg by (namespace, job_name) (longctx_train_loss{{{JOB}}})", "{{job_name}}"),),
    ),
    PanelSpec(
        "Model FLOPs utilisation",
        "MFU under both conventions: causal (6N plus the causal half of attention) and full "
        "(the 12*L*H*Q*T attention term counted without the causal discount), against the dense "
        "bf16 peak; fp8 jobs on GPUs also against the FP8 peak (peak=fp8).",
        "percentunit",
        (
            Query(
                f"avg by (namespace, job_name, convention, peak) (longctx_train_mfu_ratio{{{JOB}}})",
                "{{job_name}} {{convention}} {{peak}}",
            ),
        ),
    ),
)

LIFECYCLE = (
    PanelSpec(
        "Gang restarts",
        "Restarts of the whole worker gang by the operator (each resumes from the last checkpoint).",
        "none",
        (Query(f"max by (namespace, job_name) (longctx_operator_gang_restarts_total{{{JOB}}})", "{{job_name}}"),),
        kind="stat",
        width=6,
    ),
    PanelSpec(
        "Jobs by phase (operator-wide)",
        "LongContextJobs the operator manages, by status phase; not filtered by the job variable.",
        "none",
        (Query("sum by (phase) (longctx_operator_jobs)", "{{phase}}"),),
        width=6,
    ),
    PanelSpec(
        "Time since last checkpoint",
        "Age of the newest completed checkpoint of each job; a restart loses at most this much work.",
        "s",
        (
            Query(
                f"time() - max by (namespace, job_name) (longctx_train_last_checkpoint_timestamp_seconds{{{JOB}}} > 0)",
                "{{job_name}}",
            ),
        ),
        kind="stat",
        width=6,
    ),
    PanelSpec(
        "Checkpoint save time p95",
        "95th percentile of the time to write one checkpoint.",
        "s",
        (
            Query(
                f"histogram_quantile(0.95, sum by (le, namespace, job_name) "
                f"(rate(longctx_train_checkpoint_duration_seconds_bucket{{{JOB}}}[{RATE}])))",
                "{{job_name}}",
            ),
        ),
        width=6,
    ),
    PanelSpec(
        "Operator reconciles/s by result",
        "Reconcile rate of the operator, split by result (errors should stay at zero).",
        "reqps",
        (Query(f"sum by (result) (rate(longctx_operator_reconciles_total[{RATE}]))", "{{result}}"),),
    ),
    PanelSpec(
        "Admission wait p95",
        "Time from a generation's first refused admission (not enough free GPUs) to its gang's creation.",
        "s",
        (
            Query(
                f"histogram_quantile(0.95, sum by (le) (rate(longctx_operator_admission_wait_seconds_bucket[{RATE}])))",
                "p95",
            ),
        ),
    ),
)

GPUS = (
    PanelSpec(
        "GPU utilisation",
        "DCGM_FI_DEV_GPU_UTIL of the selected jobs' GPUs.",
        "percent",
        (Query(on_trainer_pods("DCGM_FI_DEV_GPU_UTIL"), "{{pod}} gpu {{gpu}}"),),
        width=8,
    ),
    PanelSpec(
        "Tensor core activity",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE: fraction of cycles the tensor "
        "pipes were busy, the closest hardware counterpart of MFU.",
        "percentunit",
        (Query(on_trainer_pods("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"), "{{pod}} gpu {{gpu}}"),),
        width=8,
    ),
    PanelSpec(
        "GPU memory used",
        "DCGM_FI_DEV_FB_USED (framebuffer MiB in use).",
        "mbytes",
        (Query(on_trainer_pods("DCGM_FI_DEV_FB_USED"), "{{pod}} gpu {{gpu}}"),),
        width=8,
    ),
    PanelSpec(
        "GPU power",
        "DCGM_FI_DEV_POWER_USAGE.",
        "watt",
        (Query(on_trainer_pods("DCGM_FI_DEV_POWER_USAGE"), "{{pod}} gpu {{gpu}}"),),
        width=8,
    ),
    PanelSpec(
        "NVLink traffic",
        "DCGM_FI_PROF_NVLINK_TX_BYTES and _RX_BYTES per GPU (bytes/s); context-parallel ring traffic shows here.",
        "Bps",
        (
            Query(on_trainer_pods("DCGM_FI_PROF_NVLINK_TX_BYTES"), "{{pod}} gpu {{gpu}} tx"),
            Query(on_trainer_pods("DCGM_FI_PROF_NVLINK_RX_BYTES"), "{{pod}} gpu {{gpu}} rx"),
        ),
        width=8,
    ),
    PanelSpec(
        "Last XID error",
        "DCGM_FI_DEV_XID_ERRORS: code of the last XID error per GPU "
        "(0 = none); any non-zero code deserves a look at the node.",
        "none",
        (Query(on_trainer_pods("DCGM_FI_DEV_XID_ERRORS", aggregate="max"), "{{pod}} gpu {{gpu}}"),),
        kind="stat",
        width=8,
    ),
)

ROWS = (("Training", TRAINING), ("Lifecycle and checkpoints", LIFECYCLE), ("GPUs (DCGM)", GPUS))


def panel(spec: PanelSpec, panel_id: int):
    builder = stat.Panel() if spec.kind == "stat" else timeseries.Panel()
    builder = (
        builder.id(panel_id)
        .title(spec.title)
        .description(spec.description)
        .unit(spec.unit)
        .datasource(DATASOURCE)
        .span(spec.width)
        .height(8)
    )
    for ref_id, query in zip("ABCDEFGH", spec.queries, strict=False):
        builder = builder.with_target(
            prometheus.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .ref_id(ref_id)
            .datasource(DATASOURCE)
            .range()
        )
    return builder


def variables() -> list:
    """Data source, namespace and job pickers. "All" is the regex .* so that series without a
    namespace label (a local run scraped by a plain Prometheus) and jobs newer than the list match."""
    datasource = dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
    namespace = (
        dash.QueryVariable("namespace")
        .label("Namespace")
        .datasource(DATASOURCE)
        .query("label_values(longctx_train_build_info, namespace)")
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    job = (
        dash.QueryVariable("job")
        .label("Job")
        .datasource(DATASOURCE)
        .query('label_values(longctx_train_build_info{namespace=~"$namespace"}, job_name)')
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
        .multi(True)
        .include_all(True)
        .all_value(".*")
    )
    return [datasource, namespace, job]


def build_dashboard() -> dict:
    board = (
        dash.Dashboard("longctx: long-context training")
        .uid("longctx-training")
        .description("Throughput, stragglers, loss, MFU, restarts, checkpoints and GPUs of LongContextJobs.")
        .tags(["longctx", "training", "jax"])
        .editable()
        .time("now-6h", "now")
        .refresh("30s")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .timezone("browser")
        .variables(variables())
    )
    panel_id = 0
    for title, specs in ROWS:
        panel_id += 1
        board = board.with_row(dash.Row(title).id(panel_id))
        for spec in specs:
            panel_id += 1
            board = board.with_panel(panel(spec, panel_id))
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def render() -> str:
    return json.dumps(build_dashboard(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a written copy is stale")
    args = parser.parse_args(argv)
    text = render()
    stale = [path for path in OUTPUTS if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(f"stale: {path} (run python -m dashboards.build)", file=sys.stderr)
        return 1 if stale else 0
    for path in OUTPUTS:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        print(path.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
