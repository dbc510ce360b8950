"""Two `python -m longctx_trainer` processes x two CPU devices, joined over gloo, compute the same
losses and gradients as one process x four devices (fp32; rtol 2e-5, atol 1e-7 for gradients).

Each worker gets exactly the env the operator renders (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES,
JAX_PROCESS_ID) plus the CPU device count; the two-process run also writes orbax checkpoints.
Layout data 2 x context 2: every process holds one data-parallel rank (and reads only its rows),
gradients are reduced across the processes. In the first test each rank reads its rack from a
placement file (the operator's annotation, operator/placement.py) that puts rank 1 first: the
reordered mesh computes the same numbers.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from longctx_operator.localrun import parse_event
from longctx_operator.render.env import cpu_xla_flags
from longctx_trainer.contract import podenv
from support.hlo import loops_holding_collectives
from support.multiprocess import TWO_BY_TWO, progress_events
from support.ports import free_port

pytestmark = pytest.mark.integration
RACK = "example.com/rack"


def _start(config: Path, name: str, devices: int, cwd: Path | None = None, **jax_env: str) -> subprocess.Popen:
    """Start a worker (in `cwd`, default ours); its stdout and stderr go to files (pipes could fill
    up and block it). XLA writes the train step it compiles to `<name>.hlo/`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", podenv.RESERVED_PREFIX))}
    dump = f"--xla_dump_to={config.parent / f'{name}.hlo'} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=_step"
    env.update(jax_env, XLA_FLAGS=f"{cpu_xla_flags(devices)} {dump}", JAX_PLATFORMS="cpu")  # as a CPU job's pods
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "longctx_trainer",
            "--config",
            str(config),
            "--dump-gradients",
            str(config.parent / f"{name}.npz"),
        ],
        env=env,
        cwd=cwd,
        stdout=(config.parent / f"{name}.out").open("w"),
        stderr=(config.parent / f"{name}.err").open("w"),
    )


def _start_ranks(
    config: Path, coordinator: str, racks: tuple[str, str] | None = None, cwds: tuple[Path, Path] | None = None
) -> list[subprocess.Popen]:
    """Two processes of two CPU devices each, joined at `coordinator`; with `racks`, each is told its
    rack through a placement file, as the operator's annotation reaches a pod (contract/topology.py);
    with `cwds`, each runs in its own working directory."""
    placement: list[dict[str, str]] = [{}, {}]
    for rank, rack in enumerate(racks or ()):
        path = config.parent / f"placement{rank}.json"
        path.write_text(json.dumps({RACK: rack}))
        placement[rank] = {podenv.TOPOLOGY_LEVELS: RACK, podenv.PLACEMENT_FILE: str(path)}
    return [
        _start(
            config,
            f"rank{rank}",
            2,
            cwds[rank] if cwds else None,
            JAX_COORDINATOR_ADDRESS=coordinator,
            JAX_NUM_PROCESSES="2",
            JAX_PROCESS_ID=str(rank),
            **placement[rank],
        )
        for rank in range(2)
    ]


def _loops_holding_collectives(folder: Path, name: str) -> list[str]:
    """The loops of the train step that worker `name` compiled which run collectives."""
    (step,) = (folder / f"{name}.hlo").glob("*jit__step.cpu_after_optimizations.txt")
    return loops_holding_collectives(step.read_text())


def _finish(proc: subprocess.Popen, folder: Path, name: str, timeout: float = 600) -> list[dict]:
    proc.wait(timeout=timeout)
    assert proc.returncode == 0, (folder / f"{name}.err").read_text()[-4000:]
    out = (folder / f"{name}.out").read_text()
    return [e for e in map(parse_event, out.splitlines()) if e is not None]


def test_two_processes_over_gloo_match_one_process(tmp_path):
    config, multi_config = tmp_path / "config.yaml", tmp_path / "multi.yaml"
    config.write_text(yaml.safe_dump(TWO_BY_TWO))
    # The two-process run also checkpoints: orbax across processes.
    multi_config.write_text(
        yaml.safe_dump({**TWO_BY_TWO, "checkpoint": {"path": str(tmp_path / "ckpt"), "interval_steps": 2}})
    )
    coordinator = f"127.0.0.1:{free_port()}"
    workers = _start_ranks(multi_config, coordinator, racks=("rack-b", "rack-a"))  # rank 1's rack first
    single = _start(config, "single", 4)
    rank0, rank1, reference = (
        _finish(p, tmp_path, name) for p, name in zip((*workers, single), ("rank0", "rank1", "single"), strict=False)
    )

    # Each process says who it is and whom it joined; only process 0 reports progress.
    joined = {"event": "joined", "processes": 2, "coordinator": coordinator, "local_devices": 2, "backend": "cpu"}
    assert rank1 == [{**joined, "rank": 1}]
    assert rank0[0] == {**joined, "rank": 0}
    assert reference[0]["processes"] == 1 and reference[0]["coordinator"] is None
    losses = [e["loss"] for e in rank0 if e["event"] == "step"]
    expected = [e["loss"] for e in reference if e["event"] == "step"]
    ring = next(e for e in rank0 if e["event"] == "ring_order")
    assert ring["order"] == [1, 0] and ring["cross_hops"] == {RACK: 0}, ring  # from the placement files
    assert len(losses) == 3 and rank0[-1] == {"event": "done", "step": 3}
    assert [e["step"] for e in rank0 if e["event"] == "checkpoint"] == [2, 3]
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir() if p.name.isdigit()) == ["2", "3"]
    np.testing.assert_allclose(losses, expected, rtol=2e-5)

    assert not (tmp_path / "rank1.npz").exists()  # process 0 writes
    multi, ref = np.load(tmp_path / "rank0.npz"), np.load(tmp_path / "single.npz")
    assert sorted(multi.files) == sorted(ref.files) and len(ref.files) > 5
    for name in ref.files:
        np.testing.assert_allclose(multi[name], ref[name], rtol=2e-5, atol=1e-7, err_msg=name)

    # Over gloo no loop of the step runs a collective (ops/loops.py: they could overlap the
    # collectives after the loop); in one process the layers and the ring stay loops.
    assert _loops_holding_collectives(tmp_path, "rank0") == []
    assert _loops_holding_collectives(tmp_path, "single")


def test_a_checkpoint_path_the_processes_do_not_share_trains_to_the_end_without_checkpoints(tmp_path):
    """A relative checkpoint path in two working directories is two directories, as on two pods
    with no shared claim mounted there: the first save would wait forever for the other process's
    part. The ranks find it out before training (trainer/shared_storage.py), each says so on
    stderr, and they train to the end without checkpoints."""
    config = tmp_path / "local.yaml"
    config.write_text(yaml.safe_dump({**TWO_BY_TWO, "checkpoint": {"path": "ckpt", "interval_steps": 2}}))
    pods = (tmp_path / "pod0", tmp_path / "pod1")
    for pod in pods:
        pod.mkdir()
    workers = _start_ranks(config, f"127.0.0.1:{free_port()}", cwds=pods)
    try:
        rank0 = _finish(workers[0], tmp_path, "rank0", timeout=300)
        _finish(workers[1], tmp_path, "rank1", timeout=60)
    finally:
        for worker in workers:
            worker.kill()
    assert rank0[-1] == {"event": "done", "step": 3}, rank0[-3:]
    assert not [e for e in rank0 if e["event"] == "checkpoint"]
    for rank, pod in enumerate(pods):
        assert (
            "checkpoint.path 'ckpt' is not one directory shared by the job's 2 processes"
            in (tmp_path / f"rank{rank}.err").read_text()
        )
        assert list((pod / "ckpt").iterdir()) == []  # no step, no marker left behind


def test_a_signalled_rank_exits_at_once_and_its_peer_fails(tmp_path):
    """A rank stopped mid-run by SIGINT (Ctrl-C) must end, not hang in JAX's exit barrier waiting
    for the others: the gang restart depends on it. Its peer, blocked on the lost rank, still ends
    on SIGINT. (SIGTERM is a preemption notice: test_trainer_preemption.py; a rank whose peer is
    gone cannot agree on a step and ends at the pod's grace period.)"""
    config = tmp_path / "long.yaml"
    config.write_text(
        yaml.safe_dump(
            {**TWO_BY_TWO, "steps": 100_000, "checkpoint": {"path": str(tmp_path / "ckpt"), "interval_steps": 2}}
        )
    )
    coordinator = f"127.0.0.1:{free_port()}"
    workers = _start_ranks(config, coordinator)
    try:
        deadline = time.monotonic() + 300
        while not any(e["event"] == "checkpoint" for e in progress_events(tmp_path / "rank0.out")):
            if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                pytest.fail(f"no checkpoint before the signal: {(tmp_path / 'rank0.err').read_text()[-3000:]}")
            time.sleep(0.5)
        workers[1].send_signal(signal.SIGINT)
        assert workers[1].wait(timeout=60) == -signal.SIGINT  # killed by the signal, no unwinding
        workers[0].send_signal(signal.SIGINT)
        assert workers[0].wait(timeout=60) == -signal.SIGINT
    finally:
        for worker in workers:
            worker.kill()


@pytest.mark.parametrize(
    "attention", [{"attention": "ulysses"}, {"attention": "hybrid", "ulysses": 2}], ids=["ulysses", "hybrid"]
)
def test_ulysses_and_hybrid_across_processes_match_one_process(tmp_path, attention):
    """Context 4 over the two processes, one process x four devices the reference. Ulysses: its
    all-to-alls cross the process boundary (gloo), the K/V heads repeated (2 K/V heads over 4
    devices). Hybrid: a Ulysses group of 2 inside each process, the ring between the processes."""
    parallel = {"data": 1, "context": 4, "tensor": 1, **attention}
    config = tmp_path / "context4.yaml"
    config.write_text(yaml.safe_dump({**TWO_BY_TWO, "parallelism": parallel, "steps": 2}))
    workers = _start_ranks(config, f"127.0.0.1:{free_port()}")
    single = _start(config, "single", 4)
    rank0, _, reference = (
        _finish(p, tmp_path, name) for p, name in zip((*workers, single), ("rank0", "rank1", "single"), strict=True)
    )
    losses = [e["loss"] for e in rank0 if e["event"] == "step"]
    assert len(losses) == 2
    np.testing.assert_allclose(losses, [e["loss"] for e in reference if e["event"] == "step"], rtol=2e-5)
    multi, ref = np.load(tmp_path / "rank0.npz"), np.load(tmp_path / "single.npz")
    assert sorted(multi.files) == sorted(ref.files)
    for name in ref.files:
        np.testing.assert_allclose(multi[name], ref[name], rtol=2e-5, atol=1e-7, err_msg=name)
