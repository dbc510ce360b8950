"""`longctx run`'s parsing of rank 0's output and its progress line."""

import json

from longctx_operator.localrun import event_line, parse_event, progress_line
from longctx_trainer.contract import events
from support.jobs import job_manifest

EVENT = '{"event": "step", "step": 1, "loss": 5.5, "tokens_per_second": 1234.0, "mfu": 0.0025}'


def test_progress_events_survive_interleaved_native_output():
    assert parse_event(EVENT + "\n")["step"] == 1
    assert parse_event("[Gloo] Rank 0 is connected to " + EVENT + "\n")["step"] == 1
    assert parse_event("1\n") is None and parse_event("[Gloo] Rank 0\n") is None


def test_progress_line():
    assert progress_line(parse_event(EVENT), 30) == "step 1/30  loss 5.5000  1,234 tokens/s  MFU 0.25%"


def test_the_live_line_reads_the_events_the_trainers_write():
    """The trainers' events (longctx_trainer.contract.events), printed as rank 0 prints them."""
    shown = [
        event_line(parse_event(json.dumps(event)), 30)
        for event in (
            events.step_event(3, 5.5, 1234.0, 0.0025, 0.5),
            events.checkpoint_event(3, 1.25),
            events.resume_event(3),
        )
    ]
    assert shown == [
        "step 3/30  loss 5.5000  1,234 tokens/s  MFU 0.25%",
        "checkpoint at step 3 (1.2 s)",
        "resumed from the checkpoint of step 3",
    ]


def test_readme_names_the_progress_file_the_run_writes():
    from pathlib import Path

    from longctx_operator.localrun import PROGRESS_FILE

    assert f"`{PROGRESS_FILE}`" in (Path(__file__).resolve().parents[3] / "README.md").read_text()


def test_relative_inputs_are_read_from_the_manifest_folder(tmp_path):
    from longctx_operator.api import parse_job
    from longctx_operator.localrun import with_inputs_from

    job = parse_job(
        job_manifest(
            "j",
            sequence_length=512,
            data={"kind": "text", "path": "../docs"},
            initFrom={"path": "weights"},
            checkpoint={"path": "checkpoints"},
        )
    )
    local = with_inputs_from(job, tmp_path / "examples")
    assert local.spec.data.path == str((tmp_path / "docs").resolve())
    assert local.spec.init_from.path == str((tmp_path / "examples" / "weights").resolve())
    assert local.spec.checkpoint.path == "checkpoints"  # an output: the run directory's
    absolute = with_inputs_from(
        job.model_copy(
            update={
                "spec": job.spec.model_copy(update={"data": job.spec.data.model_copy(update={"path": "/data/corpus"})})
            }
        ),
        tmp_path,
    )
    assert absolute.spec.data.path == "/data/corpus"


def test_the_live_line_shows_joining_and_compiling():
    from longctx_operator.localrun import event_line

    joined = {"event": "joined", "rank": 0, "processes": 2, "backend": "cpu", "coordinator": "x", "local_devices": 4}
    assert event_line(joined, 30) == "2 processes joined (cpu); building the model"
    assert event_line({"event": "compiling"}, 30).startswith("compiling the training step")
    assert event_line({"event": "attention_kernel", "kernel": "jax", "why": ""}, 30) is None


def test_workers_get_the_pod_env_and_only_a_few_host_variables():
    from longctx_operator.localrun import LocalWorker, worker_environment

    worker = LocalWorker(0, ["python"], {"GREETING": "hi", "PATH": "/pod/bin"})
    caller = {"PATH": "/usr/bin", "HOME": "/home/me", "AWS_SECRET_ACCESS_KEY": "s", "GITHUB_TOKEN": "t"}
    assert worker_environment(worker, caller) == {"PATH": "/pod/bin", "HOME": "/home/me", "GREETING": "hi"}


def test_a_run_directory_holds_one_run_at_a_time(tmp_path):
    import os

    import pytest

    from longctx_operator.localrun import RunDirBusy, lock_run_dir

    held = lock_run_dir(tmp_path / "run")
    with pytest.raises(RunDirBusy, match=f"^in use by another `longctx run` \\(pid {os.getpid()}\\)"):
        lock_run_dir(tmp_path / "run")
    os.close(held)  # the run ended
    os.close(lock_run_dir(tmp_path / "run"))


def test_ports_are_the_manifests_when_free_else_free_ones():
    import os
    import socket

    from longctx_operator.localrun import claim_ports

    first, claims = claim_ports(2)
    for fd in claims:
        os.close(fd)
    wanted, claims = claim_ports(2, preferred=first)
    assert wanted == first
    other, more = claim_ports(2, preferred=first)  # claimed by a live run that has not bound them yet
    assert other != first and {other, other + 1}.isdisjoint({first, first + 1})
    for fd in claims + more:
        os.close(fd)
    with socket.socket() as taken:  # bound by another program
        taken.bind(("127.0.0.1", first + 1))
        taken.listen()
        other, claims = claim_ports(2, preferred=first)
        assert first + 1 not in (other, other + 1)
    for fd in claims:
        os.close(fd)


def test_before_rank_0_reports_a_checkpoint_the_newest_on_disk_is_the_last(tmp_path):
    from longctx_operator.api import parse_job
    from longctx_operator.localrun import LocalRun

    job = parse_job(job_manifest("j", sequence_length=512, checkpoint={"path": "checkpoints"}))
    local = LocalRun(job, tmp_path)
    assert local.last_checkpoint() is None
    for name in ("2", "10", "12.orbax-checkpoint-tmp-1"):
        (tmp_path / "checkpoints" / name).mkdir(parents=True)
    assert local.last_checkpoint() == 10
    local.checkpoint = 8  # rank 0 said so (it resumed from 8)
    assert local.last_checkpoint() == 8


def test_local_workers_get_this_host_as_their_node_and_no_topology_labels(tmp_path):
    import socket

    from longctx_operator.api import parse_job
    from longctx_operator.localrun import local_workers
    from longctx_trainer.contract import podenv

    job = parse_job(
        job_manifest("j", sequence_length=512, globalBatchTokens=1024, layout=(2, 4, 1), resources=(2, 4, "cpu"))
    )
    workers = local_workers(job, tmp_path, 1234)
    assert [w.env[podenv.PROCESS_ID] for w in workers] == ["0", "1"]
    for worker in workers:
        assert worker.env[podenv.NODE_NAME] == socket.gethostname()
        assert worker.env[podenv.topology_level(0)] == ""  # no node label is copied onto a local pod
        assert worker.env[podenv.PLACEMENT_FILE] == ""  # nor any placement written: no rank waits
