"""operator/inplace_restarts.py: status.progress.inPlaceRestarts and its RestartedInPlace Event from
rank 0's `longctx_train_in_place_restarts`, a value the job author's pod serves (so hostile values
too), and the progress poller reading a real exporter's output over HTTP and patching and posting
what that decision says."""

import asyncio
import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from longctx_operator import reasons
from longctx_operator.api.crd import crd
from longctx_operator.api.status import ProgressStatus
from longctx_operator.cache import Cache
from longctx_operator.config import OperatorConfig
from longctx_operator.inplace_restarts import in_place_budget, in_place_restarts, shown_in_place_restarts
from longctx_operator.progress import ProgressPoller, progress_patch, read_rank0
from longctx_trainer.contract.exposition import MetricsUnreadable
from longctx_trainer.contract.metrics import TrainMetrics
from support.hostile_metrics import Handler, serve

BUDGET = 3


def test_a_rise_is_shown_with_one_warning_event():
    decided = in_place_restarts(shown=0, reported=1.0, budget=BUDGET, generation=2)
    assert decided.count == 1
    (event,) = decided.events
    assert (event.type, event.reason) == ("Warning", reasons.RESTARTED_IN_PLACE)
    assert "1 in-place restart in generation 2" in event.message and "maxInPlaceRestarts is 3" in event.message


def test_the_first_read_of_an_in_place_job_shows_zero_and_posts_nothing():
    assert in_place_restarts(shown=None, reported=0.0, budget=BUDGET, generation=1) == (
        in_place_restarts(shown=0, reported=0.0, budget=BUDGET, generation=1)
    )
    assert in_place_restarts(shown=None, reported=0.0, budget=BUDGET, generation=1).count == 0
    assert not in_place_restarts(shown=None, reported=0.0, budget=BUDGET, generation=1).events


def test_the_same_count_again_posts_nothing():
    decided = in_place_restarts(shown=2, reported=2.0, budget=BUDGET, generation=1)
    assert decided.count == 2 and not decided.events


def test_a_new_generation_starts_again_at_zero_without_an_event():
    decided = in_place_restarts(shown=2, reported=0.0, budget=BUDGET, generation=2)
    assert decided.count == 0 and not decided.events


def test_a_jump_of_several_restarts_between_reads_is_one_event():
    decided = in_place_restarts(shown=0, reported=3.0, budget=BUDGET, generation=1)
    assert decided.count == 3 and len(decided.events) == 1 and "3 in-place restarts" in decided.events[0].message


@pytest.mark.parametrize("reported", [None, math.nan, math.inf, -math.inf, -1.0, 0.5, 1.000001, -1e300])
def test_a_value_no_launcher_could_report_is_left_out_and_posts_nothing(reported):
    decided = in_place_restarts(shown=1, reported=reported, budget=BUDGET, generation=1)
    assert decided.count is None and not decided.events


@pytest.mark.parametrize("reported", [4.0, 1e300, 2.0**64, 1.7976931348623157e308])
def test_more_than_the_budget_is_capped_at_it(reported):
    decided = in_place_restarts(shown=None, reported=reported, budget=BUDGET, generation=1)
    assert decided.count == BUDGET and len(decided.events) == 1


def test_without_in_place_any_count_is_capped_at_zero():
    decided = in_place_restarts(shown=None, reported=2.0, budget=in_place_budget({}), generation=1)
    assert decided.count == 0 and not decided.events


@pytest.mark.parametrize(
    "spec, budget",
    [
        ({}, 0),
        ({"restartPolicy": {"inPlace": False, "maxInPlaceRestarts": 5}}, 0),
        ({"restartPolicy": {"inPlace": True}}, 3),
        ({"restartPolicy": {"inPlace": True, "maxInPlaceRestarts": 5}}, 5),
        ({"restartPolicy": {"inPlace": True, "maxInPlaceRestarts": 0}}, 0),
        ({"restartPolicy": {"inPlace": True, "maxInPlaceRestarts": -2}}, 3),
        ({"restartPolicy": {"inPlace": True, "maxInPlaceRestarts": "9"}}, 3),
        ({"restartPolicy": {"inPlace": True, "maxInPlaceRestarts": True}}, 3),
        ({"restartPolicy": {"inPlace": "yes"}}, 0),
        ({"restartPolicy": ["inPlace"]}, 0),
    ],
)
def test_the_budget_is_read_leniently_from_the_stored_spec(spec, budget):
    assert in_place_budget(spec) == budget


@pytest.mark.parametrize(
    "status, shown",
    [
        ({}, None),
        ({"progress": None}, None),
        ({"progress": {"inPlaceRestarts": 2}}, 2),
        ({"progress": {"inPlaceRestarts": -1}}, None),
        ({"progress": {"inPlaceRestarts": "2"}}, None),
        ({"progress": {"inPlaceRestarts": True}}, None),
        ({"progress": "garbage"}, None),
    ],
)
def test_the_count_shown_is_read_leniently_from_the_status(status, shown):
    assert shown_in_place_restarts(status) == shown


def _status_schema_allows(count: int) -> bool:
    """What the CRD's schema says of status.progress.inPlaceRestarts (the API server checks the patch)."""
    (version,) = crd()["spec"]["versions"]
    field = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]["progress"]["properties"][
        "inPlaceRestarts"
    ]
    return field["type"] == "integer" and count >= field.get("minimum", 0) and count <= field.get("maximum", count)


@given(
    reported=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)),
    shown=st.one_of(st.none(), st.integers(0, 1000)),
    budget=st.integers(0, 1000),
)
def test_no_value_breaks_the_patch_or_exceeds_the_budget(reported, shown, budget):
    decided = in_place_restarts(shown, reported, budget, generation=1)
    assert decided.count is None or (type(decided.count) is int and 0 <= decided.count <= budget)
    assert len(decided.events) <= 1 and all(decided.count > (shown or 0) for _ in decided.events)
    patch = progress_patch(ProgressStatus(step=1, in_place_restarts=decided.count))
    assert json.loads(json.dumps(patch, allow_nan=False)) == patch  # strict JSON: no NaN, no Infinity
    if decided.count is not None:
        assert _status_schema_allows(decided.count)


def exposition(epoch: str | None, step: int = 7) -> bytes:
    """A real trainer exporter's output after a resume, its launcher's epoch as the trainer gets it."""
    m = TrainMetrics("job", 0)
    m.observe_in_place_restarts(epoch)
    m.observe_resume(step)
    return generate_latest(m.registry)


def test_the_trainers_own_exposition_is_read():
    assert read_rank0(exposition("1"), "t").in_place_restarts == 1.0
    assert read_rank0(exposition(None), "t").in_place_restarts is None  # inPlace off: the launcher gives no epoch


@pytest.mark.parametrize(
    "sample, reported",
    [
        (b"longctx_train_in_place_restarts NaN", "nan"),
        (b"longctx_train_in_place_restarts +Inf", math.inf),
        (b"longctx_train_in_place_restarts -3", -3.0),
        (b"longctx_train_in_place_restarts 1e999", math.inf),
        (b'longctx_train_in_place_restarts{rank="1"} 2', None),  # another rank's
    ],
)
def test_hostile_samples_are_read_as_numbers_for_the_decision_to_refuse(sample, reported):
    value = read_rank0(b"longctx_train_step 3\n" + sample + b"\n", "t").in_place_restarts
    assert math.isnan(value) if reported == "nan" else value == reported, value
    assert in_place_restarts(None, value, BUDGET, 1).count is None or value == math.inf


@pytest.mark.parametrize("sample", [b"longctx_train_in_place_restarts 0x10", b"longctx_train_in_place_restarts one"])
def test_a_malformed_sample_makes_the_read_fail_and_changes_nothing(sample):
    with pytest.raises(MetricsUnreadable, match="malformed longctx_train_in_place_restarts"):
        read_rank0(b"longctx_train_step 3\n" + sample + b"\n", "t")


class _Recorder:
    """The operator's Kubernetes calls the poller makes, applied to the cache's copy of the job."""

    def __init__(self, cache: Cache):
        self.cache, self.patches, self.events = cache, [], []

    def patch_status(self, namespace, name, status):
        self.patches.append(status)
        obj = self.cache.jobs_of[(namespace, name)]
        return {**obj, "status": {**obj["status"], **status}}

    def post_event(self, owner, type_, reason, message):
        self.events.append((owner["metadata"]["name"], type_, reason, message))


class Epochs(Handler):
    """Rank 0's exporter across an in-place restart: the epoch of each read in turn."""

    epochs = ["0", "0", "1", "1", "1"]
    served = 0

    def answer(self, path: str) -> None:
        epoch = Epochs.epochs[min(Epochs.served, len(Epochs.epochs) - 1)]
        Epochs.served += 1
        self.ok(exposition(epoch))


def test_the_poller_shows_each_read_and_posts_one_event_for_one_restart():
    cache = Cache()
    kube = _Recorder(cache)
    httpd, server = serve(Epochs)
    job = {
        "metadata": {
            "namespace": "team",
            "name": "j",
            "uid": "u",
            "annotations": {"longctx.io/metrics-url": server + "/metrics"},
        },
        "spec": {"steps": 100, "restartPolicy": {"inPlace": True, "maxInPlaceRestarts": 2}},
        "status": {"phase": "Running", "workloadGeneration": 1},
    }
    cache.put_job(job, deleted=False)

    async def call(fn, *args):
        return fn(*args)

    config = OperatorConfig(metrics_url_prefixes=["http://127.0.0.1:"])
    poller = ProgressPoller(cache, kube, call, config)

    async def reads():
        for _ in Epochs.epochs:
            await poller.scrape(("team", "j"), poller.endpoint(("team", "j")))

    try:
        asyncio.run(reads())
    finally:
        poller.stop()
        httpd.shutdown()
    assert [p["progress"]["inPlaceRestarts"] for p in kube.patches] == [0, 0, 1, 1, 1]
    assert cache.jobs_of[("team", "j")]["status"]["progress"]["inPlaceRestarts"] == 1
    (event,) = kube.events
    assert event[:3] == ("j", "Warning", "RestartedInPlace") and "maxInPlaceRestarts is 2" in event[3]
