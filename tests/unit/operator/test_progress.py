"""operator/progress.py: status.progress from the trainer's real exporter output (TrainMetrics,
generate_latest), values checked for size and sign, the completion arithmetic, and the progress
timer beside a hostile endpoint (tests/support/hostile_metrics.py)."""

import asyncio

import pytest
from prometheus_client import generate_latest

from longctx_operator.api.status import ProgressStatus
from longctx_operator.cache import Cache
from longctx_operator.config import OperatorConfig
from longctx_operator.progress import Backoff, ProgressPoller, metrics_source, progress_patch, read_rank0
from longctx_trainer.contract.exposition import MetricsUnreadable
from longctx_trainer.contract.metrics import TrainMetrics
from support.hostile_metrics import Handler, serve, slow_answer
from support.ports import free_port


def exposition(rank=0, steps=True) -> bytes:
    m = TrainMetrics("job", rank)
    if steps:
        m.observe_step(
            12,
            tokens=8192,
            seconds=0.25,
            loss=3.5,
            mfu={("causal", "bf16"): 0.41, ("full", "bf16"): 0.52, ("causal", "fp8"): 0.2},
        )
        m.observe_checkpoint(10, 0.1)
    return generate_latest(m.registry)


def test_progress_of_rank_zero():
    p = read_rank0(exposition(), "2026-01-01T00:00:00Z").progress
    assert (p.step, p.tokens_per_second, p.loss, p.mfu, p.last_checkpoint_step) == (12, 8192 / 0.25, 3.5, 0.41, 10)
    assert p.updated_at == "2026-01-01T00:00:00Z"


def test_tokens_per_second_is_kept_to_a_tenth():
    p = read_rank0(
        b'longctx_train_step{rank="0"} 3\nlongctx_train_tokens_per_second{rank="0"} 1920.9673484319665\n', "t"
    ).progress
    assert p.tokens_per_second == 1921.0


def test_other_ranks_are_ignored():
    assert read_rank0(exposition(rank=1), "t").progress is None


def test_nothing_before_the_first_step():
    assert read_rank0(exposition(steps=False), "t").progress is None


def test_resume_sets_step_and_checkpoint_only():
    m = TrainMetrics("job", 0)
    m.observe_resume(40)
    p = read_rank0(generate_latest(m.registry), "t").progress
    assert (p.step, p.last_checkpoint_step, p.tokens_per_second, p.loss) == (40, 40, None, None)


def test_metrics_source_is_rank_zero_unless_the_admin_allows_the_jobs_url():
    config = OperatorConfig()
    assert metrics_source({}, "10.0.0.5", 9400, config).url == "http://10.0.0.5:9400/metrics"
    assert metrics_source({}, "fd00::5", 9400, config).url == "http://[fd00::5]:9400/metrics"
    assert metrics_source({}, None, 9400, config).url is None
    asked = {"longctx.io/metrics-url": "http://127.0.0.1:1/metrics"}
    refused = metrics_source(asked, "10.0.0.5", 9400, config)
    assert refused.url == "http://10.0.0.5:9400/metrics" and "metricsUrlPrefixes" in refused.refused
    allowed = OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"])
    assert metrics_source(asked, "10.0.0.5", 9400, allowed).url == "http://127.0.0.1:1/metrics"
    for url in ("file:///var/run/secrets/kubernetes.io/serviceaccount/token", "ftp://127.0.0.1:1/x"):
        prefixed = OperatorConfig(metrics_url_prefixes=[url[:10]])
        assert metrics_source({"longctx.io/metrics-url": url}, None, 9400, prefixed).url is None


def test_non_finite_and_huge_values_never_reach_the_status():
    text = (
        b"longctx_train_step 1e300\nlongctx_train_loss NaN\nlongctx_train_tokens_per_second +Inf\n"
        b'longctx_train_mfu_ratio{convention="causal"} 0.5\n'
    )
    p = read_rank0(text, "t").progress
    assert (p.step, p.loss, p.tokens_per_second, p.mfu) == (None, None, None, 0.5)


@pytest.mark.parametrize(
    "sample, field",
    [
        (b"longctx_train_step -5", "step"),
        (b"longctx_train_last_checkpoint_step -1", "last_checkpoint_step"),
        (b'longctx_train_mfu_ratio{convention="causal"} 1e300', "mfu"),
        (b'longctx_train_mfu_ratio{convention="causal"} -0.1', "mfu"),
        (b'longctx_train_mfu_ratio{convention="causal"} 1.5', "mfu"),
        (b"longctx_train_tokens_per_second -3", "tokens_per_second"),
        (b"longctx_train_tokens_per_second 1e200", "tokens_per_second"),
        (b"longctx_train_loss 1e300", "loss"),
        (b"longctx_train_loss -1e300", "loss"),
    ],
)
def test_values_no_trainer_could_mean_are_dropped(sample, field):
    """Defect 11 of issue #26: a negative step or an MFU of 1e300 reached status.progress."""
    p = read_rank0(b"longctx_train_loss 2.5\n" + sample + b"\n", "t").progress
    assert getattr(p, field) is None


def test_mfu_is_the_causal_convention_against_the_bf16_peak():
    text = (
        b'longctx_train_step 3\nlongctx_train_mfu_ratio{convention="causal",peak="fp8"} 0.2\n'
        b'longctx_train_mfu_ratio{convention="full",peak="bf16"} 0.6\n'
        b'longctx_train_mfu_ratio{convention="causal",peak="bf16"} 0.4\n'
    )
    assert read_rank0(text, "t").progress.mfu == 0.4


def test_a_malformed_progress_sample_is_unreadable():
    with pytest.raises(MetricsUnreadable, match="malformed longctx_train_step"):
        read_rank0(b"longctx_train_step three\n", "t")


class SlowAndHonest(Handler):
    def answer(self, path: str) -> None:
        if path == "/metrics":
            self.ok(b"longctx_train_step 3\n")
        else:
            slow_answer(path.lstrip("/").replace("-", " "), self.raw)


class _Patches:
    """Kube's status patch, recorded per job."""

    def __init__(self, cache: Cache):
        self.cache, self.steps = cache, {}

    def patch_status(self, namespace, name, status):
        self.steps.setdefault(name, []).append(status["progress"]["step"])
        obj = self.cache.jobs_of[(namespace, name)]
        return {**obj, "status": {**obj["status"], **status}}


def running_job(name: str, url: str) -> dict:
    return {
        "metadata": {"namespace": "team", "name": name, "annotations": {"longctx.io/metrics-url": url}},
        "spec": {"steps": 100},
        "status": {"phase": "Running", "workloadGeneration": 1},
    }


@pytest.mark.timeout(60)
def test_a_hostile_endpoint_delays_no_other_jobs_progress():
    """Defect 2 of issue #26: the poller waited for every read before the next round, so one
    endpoint that never finishes froze the progress of every job. Here one job's endpoint trickles
    its head forever; the honest job is read at its interval meanwhile."""
    cache = Cache()
    kube = _Patches(cache)
    httpd, server = serve(SlowAndHonest)
    for name, path in (("hostile", "/a-trickled-head"), ("silent", "/silence"), ("honest", "/metrics")):
        cache.put_job(running_job(name, server + path), deleted=False)

    async def call(fn, *args):
        return fn(*args)

    config = OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"], progress_interval_seconds=0.1)
    poller = ProgressPoller(cache, kube, call, config)

    async def go():
        task = asyncio.create_task(poller.run())
        while len(kube.steps.get("honest", [])) < 5:  # bounded by the test's timeout
            await asyncio.sleep(0.05)
        assert set(poller._tasks) == {("team", "hostile"), ("team", "silent"), ("team", "honest")}
        poller.forget(("team", "hostile"))
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert not poller._tasks

    try:
        asyncio.run(go())
    finally:
        poller.stop()
        httpd.shutdown()
    assert kube.steps["honest"][:5] == [3] * 5 and "hostile" not in kube.steps


def test_reads_that_keep_failing_back_off():
    poller = ProgressPoller(None, None, None, OperatorConfig(progress_interval_seconds=10))
    assert [poller.next_read_delay(n) for n in (0, 1, 2, 3, 9)] == [10, 20, 40, 60, 60]
    slow = ProgressPoller(None, None, None, OperatorConfig(progress_interval_seconds=600))
    assert slow.next_read_delay(3) == 600


def test_failures_count_per_endpoint():
    backoff = Backoff()
    seen = []
    for url, failed in [("a", True), ("a", True), ("a", True), (None, False), ("b", True), ("c", True), ("c", False)]:
        backoff = backoff.after(url, failed)
        seen.append(backoff.failures)
    assert seen == [1, 2, 3, 0, 1, 1, 0]


class Broken(Handler):
    def answer(self, path: str) -> None:
        if path == "/metrics":
            self.ok(b"longctx_train_step 3\n")
        else:
            self.raw(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n")


class _Recorded(ProgressPoller):
    """Records the failures each read's delay was computed from (and waits nothing); after the
    read numbered in `then`, puts that job object in the cache."""

    def __init__(self, cache, kube, then: dict[int, dict]):
        config = OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"], progress_interval_seconds=0.01)
        super().__init__(cache, kube, _direct, config)
        self.failures, self.then = [], then

    def next_read_delay(self, failures: int) -> float:
        self.failures.append(failures)
        if (job := self.then.get(len(self.failures))) is not None:
            self.cache.put_job(job, deleted=False)
        return 0.0


async def _direct(fn, *args):
    return fn(*args)


@pytest.mark.timeout(60)
def test_reads_slow_down_for_one_failing_endpoint_only():
    """Rank 0's pod that ended (a preemption in place, a gang restart) fails its reads as it goes;
    its replacement, another endpoint, was then read only after the backoff those failures had
    built up (up to a minute), and its first progress shown that much later; a trainer restarting
    in place refuses connections for seconds, which slowed the reads of it the same way. Here a
    refused endpoint is read twice and slows nothing, one answering 500 fails three reads, another
    two, and an honest one is read."""
    cache = Cache()
    kube = _Patches(cache)
    httpd, server = serve(Broken)
    then = {
        2: running_job("j", server + "/a"),
        5: running_job("j", server + "/b"),
        7: running_job("j", server + "/metrics"),
        8: {**running_job("j", server + "/metrics"), "status": {"phase": "Succeeded"}},
    }
    cache.put_job(running_job("j", f"http://127.0.0.1:{free_port()}/metrics"), deleted=False)
    poller = _Recorded(cache, kube, then)
    try:
        asyncio.run(poller.follow(("team", "j")))
    finally:
        poller.stop()
        httpd.shutdown()
    assert poller.failures == [0, 0, 1, 2, 3, 1, 2, 0]
    assert kube.steps["j"] == [3]


# (seconds, step) reads of rank 0 every 10 s, as the progress poller records them.
STEADY = [(10.0 * i, 5 * i) for i in range(10)]  # 0.5 steps/s
SLOWING = [(10.0 * i, 5 * i) for i in range(10)] + [(90 + 10.0 * i, 45 + i) for i in range(1, 31)]
RESTARTED = [(0.0, 0), (10.0, 10), (20.0, 20), (30.0, 30), (40.0, 20), (50.0, 22), (60.0, 24)]


def test_completion_of_a_steady_run():
    from longctx_operator.progress import completion

    done = completion(STEADY, total_steps=100)
    assert done.percent == 45.0
    assert done.eta_seconds == pytest.approx((100 - 45) / 0.5)


def test_completion_follows_a_slowdown_within_the_window():
    """After 300 s at 0.1 steps/s the estimate uses only those reads, not the fast start."""
    from longctx_operator.progress import completion

    done = completion(SLOWING, total_steps=100)
    assert done.percent == 75.0
    assert done.eta_seconds == pytest.approx((100 - 75) / 0.1)


def test_completion_after_a_restart_counts_from_the_resumed_step():
    from longctx_operator.progress import completion

    done = completion(RESTARTED, total_steps=100)
    assert done.percent == 24.0
    assert done.eta_seconds == pytest.approx((100 - 24) / 0.2)  # 4 steps in 20 s since step 20


def test_completion_without_movement():
    from longctx_operator.progress import completion

    assert completion([(0.0, 7)], 100).eta_seconds is None
    assert completion([(0.0, 7), (10.0, 7)], 100).eta_seconds is None
    assert completion([], 100).percent is None


def test_a_running_job_is_never_shown_done_nor_finishing_beyond_any_date():
    """Defect 11 of issue #26: step = steps while Running showed 100 % and an ETA of 0 s, and an
    ETA too far to be a date made every progress update of the job fail."""
    from longctx_operator.progress import MAX_ETA_SECONDS, completion

    assert completion([(0.0, 90), (10.0, 100)], 100) == completion([(0.0, 90), (10.0, 120)], 100)
    assert completion([(0.0, 90), (10.0, 100)], 100).percent == 99.9
    assert completion([(0.0, 90), (10.0, 100)], 100).eta_seconds is None
    assert completion([(0.0, 1), (300.0, 2)], 2**62).eta_seconds is None
    assert completion([(0.0, 1), (300.0, 2)], 2 + int(MAX_ETA_SECONDS / 300)).eta_seconds is not None
    assert completion([(0.0, -5)], 100).percent == 0.0


def test_steps_beyond_spec_steps_are_capped():
    from longctx_operator.api.status import ProgressStatus
    from longctx_operator.progress import within_steps

    capped = within_steps(ProgressStatus(step=10**15, last_checkpoint_step=10**15, loss=2.0), 100)
    assert (capped.step, capped.last_checkpoint_step, capped.loss) == (100, 100, 2.0)
    assert within_steps(ProgressStatus(loss=2.0), 100) == ProgressStatus(loss=2.0)


@pytest.mark.parametrize(
    "seconds, text", [(45, "45s"), (125, "2m5s"), (725, "12m"), (4320, "1h12m"), (7200, "2h"), (273600, "3d4h")]
)
def test_duration_text(seconds, text):
    from longctx_operator.progress import duration_text

    assert duration_text(seconds) == text


def test_a_read_deletes_what_it_leaves_out_of_the_status():
    """Merge-patch semantics: an ETA (or loss) of an earlier read is removed by a read without one."""
    old = {"step": 99, "eta": "10s", "estimatedCompletionTime": "2026-01-01T00:00:10Z", "loss": 2.0}
    patch = progress_patch(ProgressStatus(step=100, percent_complete=99.9))["progress"]
    merged = {k: v for k, v in {**old, **patch}.items() if v is not None}
    assert merged == {"step": 100, "percentComplete": 99.9}


class _Pods:
    """The cache's view of one generation's pods (all that rank0_url reads of it)."""

    def __init__(self, pods: list[dict]):
        self.pods = pods

    def generation_pods(self, key, generation):
        return self.pods


def _rank_pod(index: int, ip: str, phase: str) -> dict:
    labels = {"batch.kubernetes.io/job-completion-index": str(index)}
    return {"metadata": {"name": f"j-g1-{index}-{ip}", "labels": labels}, "status": {"phase": phase, "podIP": ip}}


def test_rank_zero_is_read_at_its_replacement_after_a_preemption_in_place():
    """The rank-0 pod that ended preempted (Failed, exit 85) stays listed before its replacement:
    reading it would leave the progress frozen at the preempted step."""
    pods = [
        _rank_pod(0, "10.0.0.9", "Failed"),
        _rank_pod(1, "10.0.0.2", "Running"),
        _rank_pod(0, "10.0.0.1", "Running"),
    ]
    poller = ProgressPoller(_Pods(pods), kube=None, call=None, config=OperatorConfig())
    job = {"metadata": {"name": "j"}, "spec": {}, "status": {"workloadGeneration": 1}}
    try:
        assert poller.rank0_url(("team", "j"), job) == "http://10.0.0.1:9400/metrics"
    finally:
        poller.stop()
