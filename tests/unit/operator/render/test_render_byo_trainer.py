"""Bring your own trainer (spec.trainer): a PyTorch job gets torch.distributed's and torchrun's env
on every fabric with the same resources as a JAX job; a custom JAX image keeps the JAX env with its
own command; the planned layout reaches any trainer as LONGCTX_* env."""

import copy

import kubernetes_validate
import pytest

from longctx_operator.api import parse_job, problems
from longctx_operator.layout import ResolvedLayout
from longctx_operator.render import render_workload
from support.jobs import job_manifest
from support.manifests import apply_case

BASE = job_manifest(
    namespace="team",
    preset="llama3-8b",
    sequence_length=131072,
    layout=(1, 8, 4),
    resources=(4, 8, "h100-80gb"),
    trainer={
        "framework": "pytorch",
        "image": "registry.example.com/team/torch-trainer:1",
        "command": ["torchrun"],
        "args": ["--nproc-per-node=8", "train.py", "--lr=3e-4"],
    },
)
LAYOUT = ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=1)
INDEX = {"fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}}
FABRICS = {
    "tcp": {"fabric": "tcp"},
    "infiniband": {"fabric": "infiniband", "networks": ["ib0"], "hcas": ["mlx5_0:1"]},
    "roce": {"fabric": "roce", "networks": ["roce-a"]},
    "efa": {"fabric": "efa", "efaDevicesPerNode": 32},
    "gcp-tcpxo": {"fabric": "gcp-tcpxo", "networks": [f"vpc{i}" for i in range(8)]},
}


def rendered(changes=None, layout=LAYOUT):
    job = parse_job(apply_case(BASE, {"set": changes or {}}))
    return render_workload(job, layout, generation=3)


def container(workload):
    return workload.job["spec"]["template"]["spec"]["containers"][0]


def env(workload):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(workload)["env"]}


@pytest.mark.parametrize("fabric", sorted(FABRICS))
def test_pytorch_job_gets_torch_env_and_the_fabric_of_a_jax_job(fabric):
    torch = rendered({"spec.network": FABRICS[fabric]})
    jax_spec = copy.deepcopy(BASE)
    del jax_spec["spec"]["trainer"]
    jax = render_workload(parse_job(apply_case(jax_spec, {"set": {"spec.network": FABRICS[fabric]}})), LAYOUT, 3)
    e = env(torch)
    assert {k: e[k] for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "NNODES", "LOCAL_WORLD_SIZE")} == {
        "MASTER_ADDR": "job-g3-0.job.team.svc.cluster.local.",
        "MASTER_PORT": "8476",
        "WORLD_SIZE": "32",
        "NNODES": "4",
        "LOCAL_WORLD_SIZE": "8",
    }
    assert e["NODE_RANK"] == INDEX and e["PET_NODE_RANK"] == INDEX
    assert (e["PET_NNODES"], e["PET_NPROC_PER_NODE"], e["PET_MASTER_ADDR"], e["PET_MASTER_PORT"]) == (
        "4",
        "8",
        "job-g3-0.job.team.svc.cluster.local.",
        "8476",
    )
    assert "RANK" not in e  # eight processes per pod: torchrun sets RANK and LOCAL_RANK
    assert not {name for name in e if name.startswith(("JAX_", "XLA_"))}
    jax_env = {v["name"]: v.get("value") for v in container(jax)["env"]}
    fabric_vars = {k: v for k, v in jax_env.items() if k.startswith(("NCCL_", "FI_"))}
    assert {k: e[k] for k in fabric_vars} == fabric_vars  # NCCL/libfabric settings as for JAX
    assert container(torch)["resources"] == container(jax)["resources"]
    assert container(torch)["securityContext"] == container(jax)["securityContext"]
    assert (
        torch.job["spec"]["template"]["metadata"]["annotations"]
        == jax.job["spec"]["template"]["metadata"]["annotations"]
    )
    assert container(torch)["command"] == ["torchrun"]
    assert container(torch)["args"] == ["--nproc-per-node=8", "train.py", "--lr=3e-4"]
    assert container(torch)["image"] == "registry.example.com/team/torch-trainer:1"
    for obj in torch.objects:
        kubernetes_validate.validate(obj, "1.36", strict=True)


def test_the_layout_reaches_any_trainer_as_env():
    e = env(
        rendered(
            {"spec.offload": {"enabled": True, "chunkTokens": 8192}},
            ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=1, offload=True, chunk_tokens=8192),
        )
    )
    assert (e["LONGCTX_DATA_PARALLEL"], e["LONGCTX_CONTEXT_PARALLEL"], e["LONGCTX_TENSOR_PARALLEL"]) == ("1", "8", "4")
    assert (e["LONGCTX_SEQUENCE_LENGTH"], e["LONGCTX_OFFLOAD_CHUNK_TOKENS"]) == ("131072", "8192")
    assert e["LONGCTX_CONFIG"] == "/etc/longctx/trainer.yaml"


def test_one_process_per_pod_sets_rank_for_env_rendezvous_without_torchrun():
    cpu = rendered(
        {
            "spec.resources": {"nodes": 2, "gpusPerNode": 4, "gpuType": "cpu"},
            "spec.network": {"fabric": "tcp"},
            "spec.globalBatchTokens": 262144,
            "spec.parallelism": {"mode": "manual", "data": 2, "context": 4, "tensor": 1},
        },
        ResolvedLayout(data=2, context=4, tensor=1, processes_per_node=1),
    )
    e = env(cpu)
    assert (e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"], e["LOCAL_RANK"]) == ("2", "1", "0")
    assert e["RANK"] == INDEX


def test_custom_jax_image_keeps_the_jax_env_with_its_own_command():
    workload = rendered(
        {
            "spec.trainer": {
                "framework": "jax",
                "image": "registry.example.com/team/jax:2",
                "command": ["python", "-m", "mytrainer"],
                "args": ["--steps=10"],
            }
        }
    )
    e = env(workload)
    assert e["JAX_COORDINATOR_ADDRESS"] == "job-g3-0.job.team.svc.cluster.local.:8476" and e["JAX_NUM_PROCESSES"] == "4"
    assert "MASTER_ADDR" not in e
    assert container(workload)["command"] == ["python", "-m", "mytrainer"]
    assert container(workload)["args"] == ["--steps=10"]


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"spec.trainer": {"framework": "pytorch"}}, "spec.trainer.command"),
        (
            {"spec.communication": {"collectivePermute": "nvshmem"}, "spec.network": {"fabric": "infiniband"}},
            "spec.communication.collectivePermute",
        ),
        ({"spec.image": "registry.example.com/other:1"}, "spec.trainer.image"),
        ({"spec.trainer.framework": "tensorflow"}, "spec.trainer.framework"),
        ({"spec.env": [{"name": "MASTER_ADDR", "value": "evil"}]}, "spec.env"),
    ],
)
def test_invalid_trainer_settings_are_refused_naming_the_field(changes, field):
    found = [p.field for p in problems(apply_case(BASE, {"set": changes}))]
    assert field in found, found
