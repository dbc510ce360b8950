"""The trainer's Prometheus exporter, scraped over HTTP after a real (tiny) training run."""

import socket
import urllib.request

import jax
import pytest
from prometheus_client.parser import text_string_to_metric_families

from longctx_trainer.checkpoint import Checkpoints
from longctx_trainer.contract.config import (
    CheckpointConfig,
    MetricsConfig,
    ModelConfig,
    ParallelConfig,
    TrainerConfig,
)
from longctx_trainer.contract.flops import flops_per_token
from longctx_trainer.contract.metrics import TrainMetrics, package_version
from longctx_trainer.contract.presets import preset
from longctx_trainer.mesh import make_mesh
from longctx_trainer.train import train
from support.ports import free_port


def _scrape(port: int) -> dict:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_exporter_serves_training_metrics(tmp_path):
    config = TrainerConfig(
        job_name="demo",
        model=ModelConfig(layers=1, hidden=32, heads=2, kv_heads=1, ffn=64, vocab=64),
        sequence_length=16,
        global_batch_tokens=32,
        steps=3,
        precision="fp32",
        parallelism=ParallelConfig(context=2),
        checkpoint=CheckpointConfig(path=str(tmp_path), interval_steps=2),
        metrics=MetricsConfig(probe_every_steps=2),
    )

    class Recorded(TrainMetrics):
        phases: list = []

        def enter(self, phase):
            self.phases.append(phase)
            super().enter(phase)

    metrics = Recorded("demo", rank=0)
    port = free_port()
    metrics.serve(port)
    metrics.describe(config, jax.default_backend())
    checkpoints = Checkpoints(config.checkpoint)
    events = []
    train(
        config,
        make_mesh(config.parallelism, jax.devices()[:2]),
        emit=events.append,
        metrics=metrics,
        checkpoints=checkpoints,
        peak_flops_per_device=1e9,
        fp8_peak_flops_per_device=2e9,
    )
    checkpoints.close()

    kinds = [e["event"] for e in events]
    assert kinds.index("compiling") < kinds.index("step")  # `longctx run` shows it before step 1
    last_step = [e for e in events if e["event"] == "step"][-1]
    samples = _scrape(port)
    rank = (("job_name", "demo"), ("rank", "0"))

    def value(name, **extra):
        return samples[(name, tuple(sorted(dict(rank, **extra).items())))]

    assert value("longctx_train_steps_total") == 3
    # health: the phases in order (checkpoints at steps 2 and 3), the heartbeat at the last step
    assert metrics.phases == [
        "starting",
        "compiling",
        "training",
        "checkpointing",
        "training",
        "checkpointing",
        "training",
    ]
    assert value("longctx_train_phase", phase="training") == 1
    assert value("longctx_train_phase", phase="compiling") == 0
    assert value("longctx_train_heartbeat_step") == 3
    assert value("longctx_train_heartbeat_timestamp_seconds") >= value(
        "longctx_train_last_checkpoint_timestamp_seconds"
    )
    assert 0 < value("longctx_train_last_step_seconds") < 600
    assert value("longctx_train_probe_seconds") > 0  # probed after step 2 (every 2 steps)
    assert 0 < value("longctx_train_data_seconds") < value("longctx_train_last_step_seconds")  # batches 2, 3
    assert value("longctx_train_tokens_total") == 3 * 32
    assert value("longctx_train_step") == 3
    assert value("longctx_train_step_duration_seconds_count") == 3
    assert value("longctx_train_step_duration_seconds_bucket", le="600.0") == 3
    assert value("longctx_train_loss") == pytest.approx(last_step["loss"])
    assert value("longctx_train_checkpoint_duration_seconds_count") == 2  # steps 2 and 3
    assert value("longctx_train_last_checkpoint_step") == 3
    assert value("longctx_train_last_checkpoint_timestamp_seconds") > 1.7e9
    causal = value("longctx_train_mfu_ratio", convention="causal", peak="bf16")
    full = value("longctx_train_mfu_ratio", convention="full", peak="bf16")
    assert 0 < causal < full  # same step time, the full convention counts more FLOPs
    assert causal == pytest.approx(last_step["mfu"])  # the event reports MFU against the bf16 peak
    assert value("longctx_train_mfu_ratio", convention="causal", peak="fp8") == pytest.approx(causal / 2)
    assert (
        value(
            "longctx_train_build_info",
            version=package_version(),
            model="custom",
            data="1",
            context="2",
            tensor="1",
            attention="ring",
            sequence_length="16",
            backend="cpu",
        )
        == 1
    )


def test_flops_per_token_conventions():
    llama = preset("llama3-8b")
    n = llama.non_embedding_param_count() + llama.vocab * llama.hidden
    attention = 12 * 32 * 32 * 128 * 8192
    assert flops_per_token(llama, 8192).full == 6 * n + attention
    assert flops_per_token(llama, 8192).causal == 6 * n + attention / 2


def test_a_taken_metrics_port_is_named():
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"^metrics port {port}: Address already in use$"):
            TrainMetrics("demo", rank=0).serve(port)


def test_in_place_restarts_are_the_launchers_epoch_where_it_gave_one():
    from longctx_trainer.contract.metrics import IN_PLACE_RESTARTS

    labels = {"job_name": "job", "rank": "1"}
    for epoch, value in ((None, None), ("x", None), ("-1", None), ("0", 0.0), ("2", 2.0)):
        metrics = TrainMetrics("job", 1)
        metrics.observe_in_place_restarts(epoch)
        assert metrics.registry.get_sample_value(IN_PLACE_RESTARTS, labels) == value, epoch
