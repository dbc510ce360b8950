"""Debian's Prometheus scrapes a real `longctx run` (two trainer processes over gloo) and a real
operator process, with the alert rules loaded; the dashboard's queries and the alert rules are run
against what it stored (docs/observability.md, "Checked against a real Prometheus").

One module-scoped run, all on loopback: Prometheus (1 s scrape and rule evaluation) is started
first, then the operator (against the local control plane, with a LongContextJob of the same
namespace/name in the cluster, so its series exist) and `longctx run` on a quickstart-derived job
with more steps than it will ever reach: it is stopped with Ctrl-C once Prometheus holds
MIN_SAMPLES scrapes of its training, however fast the machine trains. The tests then query at the
last moment the trainer was scraped, with $__rate_interval set to the whole training span seen by
Prometheus.
"""

from __future__ import annotations

import json
import math
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from longctx_operator.localrun import PROGRESS_FILE, parse_event
from support import operator_harness as h
from support.ports import consecutive_free_ports
from support.prometheus import Prometheus

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = json.loads((REPO / "dashboards" / "longctx.json").read_text())
ALERT_RULES = REPO / "alerts" / "longctx.rules.yaml"
JOB = "scrape"
STEPS = 1_000_000  # never reached: the run is stopped after MIN_SAMPLES scrapes
TOKENS_PER_STEP = 1024
MIN_SAMPLES = 30
RUN_TIMEOUT = 600
TWIN_AFTER_SAMPLES = 5


@dataclass(frozen=True)
class Scraped:
    prometheus: Prometheus
    namespace: str
    at: float  # the last scrape of rank 0 (still training)
    window: int  # seconds of training Prometheus saw, ending at `at`
    progress: list[dict]  # rank 0's worker-0.progress.jsonl

    def substitute(self, expr: str, rate_interval: str | None = None) -> str:
        """The dashboard's template variables as Grafana fills them for this job (DNS-label names:
        no regex metacharacters to escape)."""
        values = {"namespace": self.namespace, "job": JOB, "__rate_interval": rate_interval or f"{self.window}s"}
        return re.sub(r"\$\{?(\w+)\}?", lambda m: values[m.group(1)], expr)

    def query(self, expr: str) -> list[dict]:
        return self.prometheus.query(self.substitute(expr), self.at)


def _quickstart_job(metrics_port: int) -> dict:
    job = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    job["metadata"]["name"] = JOB
    job["spec"]["data"]["path"] = str((REPO / "examples" / job["spec"]["data"]["path"]).resolve())
    job["spec"].update(
        steps=STEPS, sequenceLength=512, globalBatchTokens=TOKENS_PER_STEP, metrics={"port": metrics_port}
    )
    job["spec"]["checkpoint"]["intervalSteps"] = 8  # several checkpoints inside any 30-scrape window
    return job


def _prometheus_config(namespace: str, trainer_ports: list[int], operator_port: int) -> dict:
    # Target labels as the chart's monitors set them: the PodMonitor adds the pod's namespace and
    # name to every trainer process; the ServiceMonitor keeps the operator's own labels (honorLabels).
    trainers = [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": namespace, "pod": f"{JOB}-g1-{index}"}}
        for index, port in enumerate(trainer_ports)
    ]
    return {
        "global": {"scrape_interval": "1s", "scrape_timeout": "900ms", "evaluation_interval": "1s"},
        "rule_files": [str(ALERT_RULES)],
        "scrape_configs": [
            {"job_name": "longctx-trainers", "static_configs": trainers},
            {
                "job_name": "longctx-operator",
                "honor_labels": True,
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{operator_port}"],
                        "labels": {"namespace": "longctx-system", "pod": "longctx-operator"},
                    }
                ],
            },
        ],
    }


def _training_samples(prometheus: Prometheus, namespace: str, rank: int = 0) -> list[tuple[float, float]]:
    """Raw (time, step) samples of a rank's step gauge once it has finished a step."""
    result = prometheus.query(
        f'longctx_train_step{{namespace="{namespace}", job_name="{JOB}", rank="{rank}"}}[30m]', time.time()
    )
    return [(float(t), float(v)) for t, v in result[0]["values"] if float(v) >= 1] if result else []


@pytest.fixture(scope="module")
def scraped(cluster, admin_kubectl, tmp_path_factory) -> Iterator[Scraped]:
    workdir = tmp_path_factory.mktemp("scrape")
    namespace = f"scrape-{uuid.uuid4().hex[:6]}"
    metrics_port = consecutive_free_ports(2)
    admin_kubectl.run("create", "namespace", namespace)
    run = None
    with h.running_operator(admin_kubectl, workdir, []) as operator:
        prometheus = Prometheus(
            workdir, _prometheus_config(namespace, [metrics_port, metrics_port + 1], operator.metrics_port)
        )
        try:
            job_file = workdir / "job.yaml"
            job_file.write_text(yaml.safe_dump(_quickstart_job(metrics_port)))
            run_dir = workdir / "run"
            run = subprocess.Popen(
                [sys.executable, "-m", "longctx_operator.cli", "run", str(job_file), "--run-dir", str(run_dir)],
                stdout=subprocess.DEVNULL,
                stderr=(workdir / "run.log").open("w"),
            )
            deadline = time.monotonic() + RUN_TIMEOUT

            def scrapes_reach(count: int) -> None:
                while (
                    len(_training_samples(prometheus, namespace)) < count
                    and run.poll() is None
                    and time.monotonic() < deadline
                ):
                    time.sleep(1)
                assert run.poll() is None, (workdir / "run.log").read_text()[-3000:]

            scrapes_reach(TWIN_AFTER_SAMPLES)
            # The job's twin in the cluster, created once training has been scraped for a while, so
            # that the operator's reconciles and its admission (none: immediate) fall well inside the
            # queried window: rate() only counts an increase between two samples inside the window.
            in_cluster = h.job_manifest(
                JOB, nodes=1, pod_annotations={"longctx.io/keep-running": "true"}, scheduling={"admission": "none"}
            )
            admin_kubectl.run("apply", "--namespace", namespace, "-f", "-", input=yaml.safe_dump(in_cluster))
            scrapes_reach(MIN_SAMPLES)
            run.send_signal(signal.SIGINT)  # `longctx run` stops its workers on Ctrl-C
            assert run.wait(timeout=120) == 130, (workdir / "run.log").read_text()[-3000:]
            time.sleep(3)  # let the rules evaluate once more with the finished run's data
            samples = _training_samples(prometheus, namespace)
            assert samples, f"Prometheus never scraped rank 0 (log: {prometheus.log.read_text()[-2000:]})"
            # The ranks save and exit one after the other on Ctrl-C: the window ends at the last
            # scrape that saw both of them training.
            at = min(samples[-1][0], _training_samples(prometheus, namespace, rank=1)[-1][0])
            # rank 0's stdout: the trainer's JSON progress lines among gloo's own messages
            lines = (run_dir / PROGRESS_FILE).read_text().splitlines()
            progress = [e for e in map(parse_event, lines) if e is not None]
            yield Scraped(prometheus, namespace, at, math.floor(at - samples[0][0]), progress)
        finally:
            if run is not None and run.poll() is None:
                run.send_signal(signal.SIGINT)  # `longctx run` stops its workers on Ctrl-C
                run.wait(timeout=60)
            prometheus.stop()
            admin_kubectl.run("delete", "namespace", namespace, "--wait=false", check=False)


ABSENT_HERE = ("DCGM_", "longctx_train_link_probe_seconds")
"""Series no run here serves: no DCGM exporter runs, and a gang of two processes has no link probe
(it needs three nodes: tests/integration/test_link_probe.py)."""


def _panel_queries(absent: bool) -> list:
    queries = []
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            if any(series in target["expr"] for series in ABSENT_HERE) == absent:
                queries.append(pytest.param(target["expr"], id=f"{panel['title']}/{target.get('refId', '')}"))
    return queries


def test_prometheus_scraped_both_ranks_through_the_whole_run(scraped):
    up = scraped.query('min_over_time(up{job="longctx-trainers"}[$__rate_interval])')
    assert sorted(s["metric"]["pod"] for s in up) == [f"{JOB}-g1-0", f"{JOB}-g1-1"]
    assert all(float(s["value"][1]) == 1 for s in up), up  # every scrape of both processes succeeded
    [steps] = scraped.query(f'max_over_time(longctx_train_step{{job_name="{JOB}", rank="0"}}[$__rate_interval])')
    # The window ends at the last scrape: the final step or two may finish between it and the stop.
    last_logged = max(e["step"] for e in scraped.progress if e["event"] == "step")
    assert last_logged - 3 <= float(steps["value"][1]) <= last_logged


@pytest.mark.parametrize("expr", _panel_queries(absent=False))
def test_dashboard_query_returns_data(scraped, expr):
    result = scraped.query(expr)
    assert result, f"no data for {scraped.substitute(expr)}"
    assert any(math.isfinite(float(sample["value"][1])) for sample in result), result


@pytest.mark.parametrize("expr", _panel_queries(absent=True))
def test_panel_query_of_series_absent_here_is_valid_promql(scraped, expr):
    """No DCGM exporter runs here, and two processes run no link probe: the query must parse and
    evaluate (the API rejects bad PromQL with an error), and return nothing rather than something
    unrelated."""
    assert scraped.query(expr) == []


def test_template_variables_list_the_running_job(scraped):
    start = scraped.at - scraped.window
    namespaces = scraped.prometheus.api(
        "label/namespace/values", **{"match[]": "longctx_train_build_info"}, start=start, end=scraped.at
    )
    assert scraped.namespace in namespaces
    jobs = scraped.prometheus.api(
        "label/job_name/values",
        **{"match[]": f'longctx_train_build_info{{namespace=~"{scraped.namespace}"}}'},
        start=start,
        end=scraped.at,
    )
    assert jobs == [JOB]


def test_alert_rules_evaluate_without_error(scraped):
    groups = scraped.prometheus.api("rules")["groups"]
    rules = {rule["name"]: rule for group in groups for rule in group["rules"]}
    expected = [rule["alert"] for group in yaml.safe_load(ALERT_RULES.read_text())["groups"] for rule in group["rules"]]
    assert sorted(rules) == sorted(expected)
    for name, rule in rules.items():
        assert rule["health"] == "ok" and not rule.get("lastError"), (name, rule.get("lastError"))
        assert not rule["lastEvaluation"].startswith("0001-")  # the zero time: never evaluated
        scraped.query(rule["query"])  # and evaluates at the test's instant (an error fails in api())


def test_job_tokens_per_second_matches_the_trainer_log(scraped):
    """The dashboard's job tokens/s against rank 0's own numbers for the steps inside the same
    window: tokens / (the steps' seconds + the seconds of the checkpoints saved among them)."""
    [panel] = [p for p in DASHBOARD["panels"] if p["title"] == "Job throughput (tokens/s)"]
    [result] = scraped.query(panel["targets"][0]["expr"])
    from_prometheus = float(result["value"][1])
    rank0 = f'longctx_train_step{{namespace="{scraped.namespace}", job_name="{JOB}", rank="0"}}'
    [first] = scraped.query(f"min_over_time({rank0}[$__rate_interval])")
    [last] = scraped.query(f"max_over_time({rank0}[$__rate_interval])")
    steps = range(int(float(first["value"][1])) + 1, int(float(last["value"][1])) + 1)
    logged = {e["step"]: e for e in scraped.progress if e["event"] == "step"}
    assert len(steps) >= 10 and all(step in logged for step in steps)
    # Wall time of those steps as the trainer measured it: the steps and the checkpoints saved
    # between them (Prometheus' rate is over wall time, checkpoints included).
    saved = sum(e["seconds"] for e in scraped.progress if e["event"] == "checkpoint" and e["step"] in steps)
    seconds = sum(TOKENS_PER_STEP / logged[step]["tokens_per_second"] for step in steps) + saved
    from_log = len(steps) * TOKENS_PER_STEP / seconds
    print(f"tokens/s over {len(steps)} steps: Prometheus {from_prometheus:.1f}, trainer log {from_log:.1f}")
    assert from_prometheus == pytest.approx(from_log, rel=0.10), (from_prometheus, from_log, len(steps))
