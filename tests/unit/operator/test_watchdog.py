"""operator/watchdog.py's pure parts: which endpoints are read, what a read says, the bounds."""

from prometheus_client import generate_latest

from longctx_operator.api.spec import LongContextJobSpec
from longctx_operator.watchdog import bounds, rank_read, targets
from longctx_trainer.contract.metrics import TrainMetrics


def pod(index, ip="10.0.0.1", deleting=False, phase="Running", suffix="x"):
    meta = {"name": f"j-g1-{index}-{suffix}", "labels": {"batch.kubernetes.io/job-completion-index": str(index)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status = {"phase": phase} | ({"podIP": ip} if ip else {})
    return {"metadata": meta, "spec": {"nodeName": f"n{index}"}, "status": status}


def test_every_process_of_every_live_pod_is_read_at_its_port():
    found = targets([pod(1, "10.0.0.2"), pod(0, "fd00::1"), pod(2, None), pod(3, deleting=True)], 2, 9400)
    assert found == [
        (0, "j-g1-0-x", "n0", "http://[fd00::1]:9400/metrics"),
        (1, "j-g1-0-x", "n0", "http://[fd00::1]:9401/metrics"),
        (2, "j-g1-1-x", "n1", "http://10.0.0.2:9400/metrics"),
        (3, "j-g1-1-x", "n1", "http://10.0.0.2:9401/metrics"),
        (4, "j-g1-2-x", "n2", None),
        (5, "j-g1-2-x", "n2", None),
    ]


def test_a_rank_that_ended_preempted_is_read_at_its_replacement_only():
    """After a preemption in place the ended pod (Failed, exit 85) stays beside its replacement."""
    ended = pod(0, "10.0.0.9", phase="Failed", suffix="old")
    assert targets([ended, pod(0, "10.0.0.1"), pod(1, "10.0.0.2", phase="Succeeded")], 1, 9400) == [
        (0, "j-g1-0-x", "n0", "http://10.0.0.1:9400/metrics")
    ]


def test_a_read_of_the_trainers_own_exporter():
    m = TrainMetrics("job", 3)
    assert rank_read(3, "p", "n", generate_latest(m.registry)).phase == "starting"
    m.enter("compiling")
    m.observe_resume(40)
    m.enter("training")
    m.observe_step(41, tokens=8, seconds=0.5, loss=1.0, mfu={})
    read = rank_read(3, "p", "n", generate_latest(m.registry))
    assert (read.phase, read.step, read.step_seconds, read.probe_seconds) == ("training", 41, 0.5, None)
    m.observe_probe(0.02)
    assert rank_read(3, "p", "n", generate_latest(m.registry)).probe_seconds == 0.02
    assert rank_read(3, "p", "n", generate_latest(m.registry)).data_seconds is None
    m.observe_data(0.25)
    assert rank_read(3, "p", "n", generate_latest(m.registry)).data_seconds == 0.25
    assert rank_read(3, "p", "n", None).phase is None


def test_values_no_exporter_could_mean_are_dropped():
    body = b"longctx_train_heartbeat_step -3\nlongctx_train_last_step_seconds NaN\n"
    body += b'longctx_train_phase{phase="training"} 1\nlongctx_train_probe_seconds -1\n'
    body += b"longctx_train_data_seconds +Inf\n"
    read = rank_read(0, "p", None, body)
    assert (read.phase, read.step, read.step_seconds, read.probe_seconds) == ("training", None, None, None)
    assert read.data_seconds is None


def test_the_planned_step_comes_from_the_status_layout():
    spec = LongContextJobSpec.model_validate(
        {
            "model": {"preset": "tiny"},
            "sequenceLength": 4096,
            "globalBatchTokens": 8192,
            "resources": {"nodes": 2, "gpusPerNode": 8, "gpuType": "h100-80gb"},
            "hangDetection": {"stepFactor": 5, "floorSeconds": 30},
            "stragglerDetection": {"slowerPercent": 20, "windowSeconds": 90},
        }
    )
    hang, slow = bounds(spec, {"layout": {"estimatedTokensPerSecond": 4096.0}})
    assert (hang.step_factor, hang.floor_seconds, hang.planned_step_seconds) == (5, 30, 2.0)
    assert (slow.slower_percent, slow.window_seconds) == (20, 90)
    assert bounds(spec, {})[0].planned_step_seconds is None
