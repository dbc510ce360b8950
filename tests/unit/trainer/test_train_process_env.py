"""Process identity from the JAX_* env, the NVSHMEM one-GPU-per-process rule, mesh size checks."""

import jax
import pytest

from longctx_trainer.contract.config import ParallelConfig
from longctx_trainer.distributed import ProcessEnv, initialize
from longctx_trainer.mesh import make_mesh


def test_env_of_a_multi_process_worker():
    env = ProcessEnv.from_environ(
        {
            "JAX_COORDINATOR_ADDRESS": "job-0.job:1234",
            "JAX_NUM_PROCESSES": "4",
            "JAX_PROCESS_ID": "3",
            "JAX_LOCAL_DEVICE_IDS": "2, 3",
            "LONGCTX_PROCESSES_PER_POD": "2",
        }
    )
    assert env == ProcessEnv("job-0.job:1234", 4, 3, (2, 3), processes_per_node=2)


def test_single_process_needs_no_env():
    assert ProcessEnv.from_environ({}) == ProcessEnv(None, 1, 0, None)


@pytest.mark.parametrize(
    "environ,message",
    [
        ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1"}, "JAX_COORDINATOR_ADDRESS"),
        ({"JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "2", "JAX_COORDINATOR_ADDRESS": "a:1"}, "JAX_PROCESS_ID=2"),
        (
            {
                "JAX_NUM_PROCESSES": "4",
                "JAX_PROCESS_ID": "0",
                "JAX_COORDINATOR_ADDRESS": "a:1",
                "LONGCTX_PROCESSES_PER_POD": "3",
            },
            "LONGCTX_PROCESSES_PER_POD=3 does not divide",
        ),
        ({"LONGCTX_PROCESSES_PER_POD": "0"}, "LONGCTX_PROCESSES_PER_POD=0"),
        ({"LONGCTX_PROCESSES_PER_POD": "two"}, "LONGCTX_PROCESSES_PER_POD=two"),
    ],
)
def test_inconsistent_env_is_refused(environ, message):
    with pytest.raises(ValueError, match=message):
        ProcessEnv.from_environ(environ)


def test_nvshmem_refuses_a_process_without_exactly_one_gpu():
    with pytest.raises(SystemExit, match="one GPU per process"):
        initialize(ProcessEnv.from_environ({}), communication="nvshmem")


def test_mesh_must_use_every_device_of_the_layout():
    with pytest.raises(ValueError, match="needs 4 devices, but 8"):
        make_mesh(ParallelConfig(context=2, tensor=2))
    mesh = make_mesh(ParallelConfig(data=2, context=2, tensor=2))
    assert mesh.axis_names == ("data", "context", "tensor")
    # tensor innermost: a tensor-parallel pair is two consecutive devices
    assert [d.id for d in mesh.devices[0, 0]] == [jax.devices()[0].id, jax.devices()[1].id]
