"""Rendering: every object is a valid Kubernetes object; fabric and NVSHMEM settings are exact."""

import dataclasses
import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from longctx_operator.api import parse_job
from longctx_operator.cli import main
from longctx_operator.config import OperatorConfig
from longctx_operator.layout import ResolvedLayout
from longctx_operator.render import fabrics as fabrics_module
from longctx_operator.render import render_workload
from longctx_operator.render import workload as workload_module
from longctx_operator.render.env import CPU_XLA_FLAGS
from longctx_operator.resolve import resolve_layout
from longctx_trainer.contract.config import TrainerConfig
from support.jobs import job_manifest
from support.manifests import EXAMPLES, apply_case, load_example

ROOT = Path(__file__).resolve().parents[4]
K8S_VERSION = "1.36"
BASE = job_manifest(
    namespace="team", preset="llama3-8b", sequence_length=131072, layout=(1, 8, 4), resources=(4, 8, "h100-80gb")
)
LAYOUT = ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=1)


def render(changes=None, layout=LAYOUT, generation=1):
    job = parse_job(apply_case(BASE, {"set": changes or {}}))
    return render_workload(job, layout, generation).objects


def pod(workload):
    return workload["spec"]["template"]


def trainer(workload):
    return pod(workload)["spec"]["containers"][0]


def env(workload):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in trainer(workload)["env"]}


def limits(workload):
    return trainer(workload)["resources"]["limits"]


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_examples_render_valid_kubernetes_objects(example):
    job = parse_job(load_example(example))
    layout, _ = resolve_layout(job.spec)
    objects = render_workload(job, layout).objects
    assert [o["kind"] for o in objects] == ["Service", "ConfigMap", "Job"]
    for obj in objects:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_indexed_job_and_headless_service_shape():
    service, config, workload = render(generation=3)
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["publishNotReadyAddresses"]
    assert service["metadata"]["name"] == "job"
    spec = workload["spec"]
    assert workload["metadata"]["name"] == "job-g3"
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == spec["parallelism"] == 4 and spec["backoffLimit"] == 0
    assert pod(workload)["spec"]["subdomain"] == "job"
    labels = pod(workload)["metadata"]["labels"]
    assert labels["longctx.io/job-name"] == "job" and labels["longctx.io/generation"] == "3"
    assert service["spec"]["selector"] == {"longctx.io/job-name": "job"}


def test_jax_distributed_env_one_process_per_pod():
    _, _, workload = render(generation=2)
    e = env(workload)
    # Fully qualified, with the trailing dot: no search-path lookup can reach another namespace.
    assert e["JAX_COORDINATOR_ADDRESS"] == "job-g2-0.job.team.svc.cluster.local.:8476"
    assert e["JAX_NUM_PROCESSES"] == "4"
    assert e["JAX_PROCESS_ID"] == {
        "fieldRef": {"fieldPath": "metadata.labels['batch.kubernetes.io/job-completion-index']"}
    }
    assert e["LONGCTX_PROCESSES_PER_POD"] == "1"
    assert e["XLA_FLAGS"] == "--xla_gpu_enable_latency_hiding_scheduler=true"


def test_rank0_name_is_in_the_jobs_namespace_and_the_configured_cluster_domain():
    """The rendezvous name is fully qualified: `<pod>.<service>` alone would go through the
    resolver's search path (`<pod>.<service>.svc.<domain>`: a Service in a namespace named like the
    job) and then to public DNS before rank 0 has its record."""
    torch_trainer = {"framework": "pytorch", "image": "registry.example.com/t:1", "command": ["torchrun"]}
    job = parse_job(apply_case(BASE, {"set": {"metadata.namespace": "ml-a", "spec.trainer": torch_trainer}}))
    pytorch = render_workload(job, LAYOUT, 5, OperatorConfig(cluster_domain="corp.example")).job
    assert env(pytorch)["MASTER_ADDR"] == "job-g5-0.job.ml-a.svc.corp.example."
    assert pod(pytorch)["spec"]["subdomain"] == "job"  # the pod's own name under that Service
    jax = render_workload(parse_job(BASE), LAYOUT, 5, OperatorConfig(cluster_domain="corp.example")).job
    assert env(jax)["JAX_COORDINATOR_ADDRESS"] == "job-g5-0.job.team.svc.corp.example.:8476"
    with pytest.raises(ValueError, match="cluster_domain|clusterDomain"):
        OperatorConfig(cluster_domain="cluster.local;evil")


def test_the_gang_network_policy_admits_the_gang_and_the_metrics_readers_only():
    assert [o["kind"] for o in render()] == ["Service", "ConfigMap", "Job"]  # off by default
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    config = OperatorConfig.model_validate({"gangNetworkPolicy": {"enabled": True, "metricsReaders": [prometheus]}})
    job = parse_job(apply_case(BASE, {"set": {"spec.metrics": {"port": 9400}}}))
    workload = render_workload(job, dataclasses.replace(LAYOUT, processes_per_node=8), 2, config)
    assert [o["kind"] for o in workload.objects] == ["Service", "ConfigMap", "NetworkPolicy", "Job"]
    policy = workload.network_policy
    kubernetes_validate.validate(policy, K8S_VERSION, strict=True)
    gang = {"matchLabels": {"longctx.io/job-name": "job"}}
    assert policy["metadata"]["name"] == "job" and policy["metadata"]["namespace"] == "team"
    assert policy["spec"]["podSelector"] == gang and policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [
        {"from": [{"podSelector": gang}]},  # the gang itself, any port: the collectives pick theirs
        {"from": [prometheus], "ports": [{"protocol": "TCP", "port": 9400, "endPort": 9407}]},
    ]
    # Every rank of the gang carries the label the policy admits.
    assert pod(workload.job)["metadata"]["labels"]["longctx.io/job-name"] == "job"


def test_a_lost_node_is_tolerated_for_node_lost_seconds_unless_the_job_tolerates_it_itself():
    """Kubernetes tolerates a NotReady or unreachable node for 300 s: the gang's pods for
    restartPolicy.nodeLostSeconds only, so the taint manager marks them for disruption soon and
    the operator restarts the gang elsewhere (observe.lost_node)."""
    _, _, workload = render({"spec.restartPolicy": {"nodeLostSeconds": 20}})
    spec = pod(workload)["spec"]
    lost = {t["key"]: t for t in spec["tolerations"] if t.get("effect") == "NoExecute"}
    assert lost == {
        key: {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 20}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    }
    own = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
    _, _, workload = render({"spec.scheduling": {"tolerations": [own]}})
    spec = pod(workload)["spec"]
    assert [t for t in spec["tolerations"] if t["key"] == "node.kubernetes.io/unreachable"] == [own]


def test_gpu_pod_requests_selectors_tolerations_and_shm():
    _, _, workload = render({"spec.resources.sharedMemory": "32Gi", "spec.resources.cpu": "96"})
    assert limits(workload) == {"nvidia.com/gpu": "8", "cpu": "96"}
    assert trainer(workload)["resources"]["requests"] == limits(workload)
    spec = pod(workload)["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    ports = {p["name"]: p["containerPort"] for p in trainer(workload)["ports"]}
    assert ports == {"metrics": 9400, "coordinator": 8476}


def test_one_named_metrics_port_per_process_of_a_pod():
    _, _, workload = render(
        {"spec.metrics.port": 9500}, ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=8)
    )
    ports = {p["name"]: p["containerPort"] for p in trainer(workload)["ports"]}
    assert ports == {"coordinator": 8476, "metrics": 9500, **{f"metrics-{i}": 9500 + i for i in range(1, 8)}}
    assert all(len(name) <= 15 for name in ports)  # IANA_SVC_NAME limit of container port names


def test_tcp_profile():
    _, _, workload = render()
    e = env(workload)
    assert e["NCCL_SOCKET_IFNAME"] == "eth0" and e["NCCL_IB_DISABLE"] == "1"
    assert limits(workload) == {"nvidia.com/gpu": "8"}
    assert pod(workload)["metadata"]["annotations"] == {}


def test_infiniband_profile():
    _, _, workload = render(
        {
            "spec.network": {
                "fabric": "infiniband",
                "networks": ["ib0", "ib1"],
                "hcas": ["mlx5_0:1", "mlx5_1:1"],
                "socketInterface": "net1",
            }
        }
    )
    e = env(workload)
    assert (e["NCCL_NET"], e["NCCL_IB_DISABLE"], e["NCCL_SOCKET_IFNAME"], e["NCCL_IB_HCA"]) == (
        "IB",
        "0",
        "net1",
        "mlx5_0:1,mlx5_1:1",
    )
    assert "NCCL_IB_GID_INDEX" not in e
    assert limits(workload) == {"nvidia.com/gpu": "8", "rdma/rdma_shared_device_a": "1"}
    assert pod(workload)["metadata"]["annotations"] == {"k8s.v1.cni.cncf.io/networks": "ib0,ib1"}
    assert trainer(workload)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }


def test_roce_profile_with_sriov_resource():
    _, _, workload = render(
        {
            "spec.network": {
                "fabric": "roce",
                "networks": ["roce-a"],
                "rdmaResource": "nvidia.com/sriov_roce",
                "rdmaResourceCount": 2,
            }
        }
    )
    assert env(workload)["NCCL_IB_GID_INDEX"] == "3"
    assert limits(workload)["nvidia.com/sriov_roce"] == "2"


def test_efa_profile():
    _, _, workload = render({"spec.network": {"fabric": "efa", "efaDevicesPerNode": 32}})
    e = env(workload)
    assert (e["FI_PROVIDER"], e["FI_EFA_USE_HUGE_PAGE"], e["FI_EFA_USE_DEVICE_RDMA"]) == ("efa", "0", "1")
    assert limits(workload) == {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "32", "hugepages-2Mi": "5120Mi"}


def _gke_nics(workload):
    return json.loads(pod(workload)["metadata"]["annotations"]["networking.gke.io/interfaces"])


def test_gcp_tcpx_profile():
    nets = ["vpc1", "vpc2", "vpc3", "vpc4"]
    _, _, workload = render({"spec.network": {"fabric": "gcp-tcpx", "networks": nets}})
    assert _gke_nics(workload)[1:] == [{"interfaceName": f"eth{i + 1}", "network": n} for i, n in enumerate(nets)]
    e = env(workload)
    assert e["NCCL_GPUDIRECTTCPX_SOCKET_IFNAME"] == "eth1,eth2,eth3,eth4"
    assert e["NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX"] == "/run/tcpx"
    sidecar = pod(workload)["spec"]["initContainers"][0]
    assert sidecar["name"] == "tcpx-daemon" and sidecar["restartPolicy"] == "Always"
    assert sidecar["securityContext"] == {"privileged": True, "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}
    assert pod(workload)["spec"]["containers"][0]["securityContext"].get("runAsUser") != 0  # the trainer never
    annotations = pod(workload)["metadata"]["annotations"]
    assert "/dev/nvidia7" in annotations["devices.gke.io/container.tcpx-daemon"]


def test_gcp_tcpxo_profile():
    nets = [f"gpu-nic{i}" for i in range(8)]
    _, _, workload = render({"spec.network": {"fabric": "gcp-tcpxo", "networks": nets}})
    assert len(_gke_nics(workload)) == 9
    e = env(workload)
    assert e["NCCL_FASTRAK_IFNAME"] == ",".join(f"eth{i}" for i in range(1, 9))
    assert e["NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY"] == "/dev/aperture_devices"
    sidecar = pod(workload)["spec"]["initContainers"][0]
    assert sidecar["name"] == "tcpxo-daemon" and sidecar["restartPolicy"] == "Always"
    assert sidecar["securityContext"]["runAsUser"] == 0  # NET_ADMIN needs an effective root user
    assert "--num_nics=8" in sidecar["command"][-1]
    assert (
        "/dev/dmabuf_import_helper" in pod(workload)["metadata"]["annotations"]["devices.gke.io/container.tcpxo-daemon"]
    )


def test_gcp_rdma_profile():
    nets = [f"rdma-{i}" for i in range(8)]
    _, _, workload = render(
        {"spec.resources.gpuType": "h200-141gb", "spec.network": {"fabric": "gcp-rdma", "networks": nets}}
    )
    assert env(workload)["NCCL_NET"] == "gIB"
    assert [n["network"] for n in _gke_nics(workload)[1:]] == nets
    mounts = {m["mountPath"] for m in trainer(workload)["volumeMounts"]}
    assert {"/usr/local/gib", "/usr/local/nvidia"} <= mounts
    assert pod(workload)["spec"]["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H200"


EVERY_FABRIC = {
    "tcp": {"spec.network": {"fabric": "tcp"}},
    "infiniband": {"spec.network": {"fabric": "infiniband", "networks": ["ib0"]}},
    "roce": {"spec.network": {"fabric": "roce", "networks": ["roce-a"]}},
    "efa": {"spec.network": {"fabric": "efa", "efaDevicesPerNode": 32}},
    "gcp-tcpx": {"spec.network": {"fabric": "gcp-tcpx", "networks": [f"vpc{i}" for i in range(4)]}},
    "gcp-tcpxo": {"spec.network": {"fabric": "gcp-tcpxo", "networks": [f"vpc{i}" for i in range(8)]}},
    "gcp-rdma": {
        "spec.resources.gpuType": "h200-141gb",
        "spec.network": {"fabric": "gcp-rdma", "networks": [f"rdma-{i}" for i in range(8)]},
    },
}


def containers(workload):
    spec = pod(workload)["spec"]
    return spec["containers"] + spec.get("initContainers", [])


@pytest.mark.parametrize("fabric", sorted(EVERY_FABRIC))
def test_host_folders_are_mounted_read_only_but_the_documented_daemon_exceptions(fabric):
    """No host folder is writable from the author's container; a receive-datapath daemon writes only
    where its vendor's recipe must (WRITABLE_HOST_MOUNTS), and docs/security.md says why."""
    _, _, workload = render(EVERY_FABRIC[fabric])
    host = {v["name"]: v["hostPath"]["path"] for v in pod(workload)["spec"]["volumes"] if "hostPath" in v}
    security = (ROOT / "docs" / "security.md").read_text()
    for container in containers(workload):
        for mount in container.get("volumeMounts", []):
            if mount["name"] not in host:
                continue
            key = (container["name"], mount["name"])
            if key in fabrics_module.WRITABLE_HOST_MOUNTS:
                assert container["name"] != "trainer" and "readOnly" not in mount
                assert f"`{host[mount['name']]}`" in security and f"`{container['name']}`" in security, key
            else:
                assert mount.get("readOnly") is True, (fabric, key)


def test_the_default_allow_list_has_every_fabric_without_a_privileged_container():
    allowed = OperatorConfig().network_allow_list.default.fabrics
    assert set(EVERY_FABRIC) == set(fabrics_module.PROFILES)
    for fabric, changes in EVERY_FABRIC.items():
        _, _, workload = render(changes)
        privileged = any(c.get("securityContext", {}).get("privileged") for c in containers(workload))
        assert (fabric in allowed) == (not privileged), fabric


def test_nvshmem_on_infiniband_derives_from_nccl_settings():
    layout = ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=8)
    _, _, workload = render(
        {
            "spec.communication": {"collectivePermute": "nvshmem", "nvshmemSymmetricSize": "8G"},
            "spec.network": {"fabric": "infiniband", "hcas": ["mlx5_0:1"], "socketInterface": "net1"},
        },
        layout,
    )
    e = env(workload)
    assert e["XLA_FLAGS"].split() == [
        "--xla_gpu_enable_latency_hiding_scheduler=true",
        "--xla_gpu_experimental_enable_nvshmem=true",
    ]
    assert e["NVSHMEM_REMOTE_TRANSPORT"] == "ibrc"
    assert e["NVSHMEM_HCA_LIST"] == e["NCCL_IB_HCA"] == "mlx5_0:1"
    assert e["NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME"] == "net1"
    assert e["NVSHMEM_SYMMETRIC_SIZE"] == "8G"
    assert e["JAX_NUM_PROCESSES"] == "32" and e["LONGCTX_PROCESSES_PER_POD"] == "8"
    assert e["LONGCTX_DEVICES_PER_PROCESS"] == "1"
    assert "JAX_PROCESS_ID" not in e  # the in-pod launcher derives it per process


def test_nvshmem_on_roce_and_efa():
    _, _, roce = render(
        {
            "spec.communication.collectivePermute": "nvshmem",
            "spec.network": {"fabric": "roce", "networks": ["r"], "gidIndex": 5},
        },
        ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=8),
    )
    assert env(roce)["NVSHMEM_IB_GID_INDEX"] == env(roce)["NCCL_IB_GID_INDEX"] == "5"
    _, _, efa = render(
        {"spec.communication.collectivePermute": "nvshmem", "spec.network": {"fabric": "efa", "efaDevicesPerNode": 32}},
        ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=8),
    )
    assert env(efa)["NVSHMEM_REMOTE_TRANSPORT"] == "libfabric"
    assert env(efa)["NVSHMEM_LIBFABRIC_PROVIDER"] == "efa"


def test_kueue_admission_creates_a_suspended_job_with_the_queue_label():
    _, _, workload = render({"spec.scheduling": {"admission": "kueue", "queueName": "team-q"}})
    assert workload["spec"]["suspend"] is True
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-q"
    _, _, builtin = render()
    assert builtin["spec"]["suspend"] is False


@pytest.mark.parametrize("mode", ["preferred", "required"])
def test_kueue_topology_asks_kueue_for_one_domain_of_the_topology_key(mode):
    _, _, workload = render(
        {"spec.scheduling": {"admission": "kueue", "queueName": "q", "topologyKey": "rack", "kueueTopology": mode}}
    )
    annotations = pod(workload)["metadata"]["annotations"]
    assert annotations[f"kueue.x-k8s.io/podset-{mode}-topology"] == "rack"
    other = "required" if mode == "preferred" else "preferred"
    assert f"kueue.x-k8s.io/podset-{other}-topology" not in annotations


def test_kueue_topology_none_and_the_builtin_admission_render_no_topology_request():
    _, _, kueue = render({"spec.scheduling": {"admission": "kueue", "queueName": "q"}})
    _, _, builtin = render()
    for workload in (kueue, builtin):
        assert not any(k.startswith("kueue.x-k8s.io/") for k in pod(workload)["metadata"].get("annotations", {}))


def test_workload_priority_class_is_the_jobs_kueue_priority_label():
    _, _, workload = render(
        {"spec.scheduling": {"admission": "kueue", "queueName": "q", "workloadPriorityClassName": "urgent"}}
    )
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/priority-class"] == "urgent"
    assert "kueue.x-k8s.io/priority-class" not in pod(workload)["metadata"]["labels"]


def test_checkpoint_claim_is_mounted_at_the_checkpoint_path():
    _, _, workload = render({"spec.checkpoint": {"path": "/ckpt", "persistentVolumeClaim": "c"}})
    assert {"name": "checkpoints", "mountPath": "/ckpt"} in trainer(workload)["volumeMounts"]
    assert {"name": "checkpoints", "persistentVolumeClaim": {"claimName": "c"}} in pod(workload)["spec"]["volumes"]


def test_initial_weights_claim_is_mounted_read_only_at_its_path():
    _, _, workload = render({"spec.initFrom": {"path": "/weights/llama3-8b", "persistentVolumeClaim": "hf"}})
    assert {"name": "initial-weights", "mountPath": "/weights/llama3-8b", "readOnly": True} in trainer(workload)[
        "volumeMounts"
    ]
    assert {"name": "initial-weights", "persistentVolumeClaim": {"claimName": "hf", "readOnly": True}} in pod(workload)[
        "spec"
    ]["volumes"]
    _, _, unmounted = render({"spec.initFrom": {"path": "/image/weights"}})  # e.g. baked into the image
    assert "initial-weights" not in [v["name"] for v in pod(unmounted)["spec"]["volumes"]]


def test_configmap_carries_a_trainer_config_the_trainer_parses():
    _, config, _ = render(
        {"spec.offload": {"enabled": True, "chunkTokens": 4096}},
        ResolvedLayout(data=1, context=8, tensor=4, processes_per_node=1, offload=True, chunk_tokens=4096),
    )
    parsed = TrainerConfig.model_validate(yaml.safe_load(config["data"]["trainer.yaml"]))
    assert (parsed.parallelism.context, parsed.parallelism.tensor) == (8, 4)
    assert parsed.offload.enabled and parsed.offload.chunk_tokens == 4096
    assert parsed.model.layers == 32 and parsed.model.kv_heads == 8
    assert parsed.sequence_length == 131072 and parsed.job_name == "job"


def test_packing_reaches_the_trainer_config():
    packing = {"documentMask": True, "resetPositions": True, "separator": 128001}
    _, config, _ = render({"spec.data": {"kind": "tokens", "path": "/data/corpus.bin", "packing": packing}})
    parsed = TrainerConfig.model_validate(yaml.safe_load(config["data"]["trainer.yaml"]))
    assert parsed.data.packing.document_mask and parsed.data.packing.reset_positions
    assert parsed.data.packing.separator == 128001
    _, unpacked, _ = render({})
    assert not TrainerConfig.model_validate(yaml.safe_load(unpacked["data"]["trainer.yaml"])).data.packing.enabled


def test_cpu_job_has_no_gpu_settings():
    _, _, workload = render(
        {
            "spec.resources": {"nodes": 2, "gpusPerNode": 4, "gpuType": "cpu"},
            "spec.parallelism": {"mode": "manual", "data": 1, "context": 8, "tensor": 1},
        },
        ResolvedLayout(data=1, context=8, tensor=1, processes_per_node=1),
    )
    e = env(workload)
    assert e["JAX_PLATFORMS"] == "cpu"
    assert e["XLA_FLAGS"].split() == ["--xla_force_host_platform_device_count=4", *CPU_XLA_FLAGS]
    spec = pod(workload)["spec"]
    assert not any(t["key"] == "nvidia.com/gpu" for t in spec["tolerations"]) and spec["nodeSelector"] == {}
    # No GPU count bounds a CPU job: it always gets cpu and memory, the operator's defaults here.
    config = OperatorConfig()
    assert limits(workload) == {"cpu": config.cpu_job_cpu, "memory": config.cpu_job_memory}
    assert trainer(workload)["resources"]["requests"] == limits(workload)
    shm = next(v for v in spec["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"]["sizeLimit"] == config.cpu_job_memory  # 64Gi asked, capped at the memory


CPU_JOB = {
    "spec.resources": {"nodes": 2, "gpusPerNode": 4, "gpuType": "cpu", "cpu": "1", "memory": "4Gi"},
    "spec.parallelism": {"mode": "manual", "data": 1, "context": 8, "tensor": 1},
}


@pytest.mark.parametrize(
    "changes, expected",
    [
        ({}, {"cpu": "1", "memory": "4Gi", "shm": "4Gi"}),
        ({"spec.resources.sharedMemory": "1Gi"}, {"cpu": "1", "memory": "4Gi", "shm": "1Gi"}),
        ({"spec.resources.sharedMemory": "5000Mi"}, {"cpu": "1", "memory": "4Gi", "shm": "4Gi"}),
    ],
)
def test_shared_memory_is_capped_at_the_pods_memory(changes, expected):
    _, _, workload = render({**CPU_JOB, **changes}, ResolvedLayout(data=1, context=8, tensor=1, processes_per_node=1))
    shm = next(v for v in pod(workload)["spec"]["volumes"] if v["name"] == "dshm")
    assert {**limits(workload), "shm": shm["emptyDir"]["sizeLimit"]} == expected


def test_cpu_job_defaults_come_from_the_operator_configuration():
    unsized = {"nodes": 2, "gpusPerNode": 4, "gpuType": "cpu"}
    job = parse_job(apply_case(BASE, {"set": {**CPU_JOB, "spec.resources": unsized}}))
    config = OperatorConfig(cpu_job_cpu="500m", cpu_job_memory="1Gi")
    workload = render_workload(job, ResolvedLayout(data=1, context=8, tensor=1, processes_per_node=1), 1, config).job
    assert limits(workload) == {"cpu": "500m", "memory": "1Gi"}


def test_user_env_comes_last_and_replaces_a_fabric_setting_in_place():
    _, _, workload = render(
        {"spec.env": [{"name": "NCCL_DEBUG", "value": "INFO"}, {"name": "NCCL_SOCKET_IFNAME", "value": "bond0"}]}
    )
    names = [e["name"] for e in trainer(workload)["env"]]
    assert names[-1] == "NCCL_DEBUG" and env(workload)["NCCL_DEBUG"] == "INFO"
    assert names.count("NCCL_SOCKET_IFNAME") == 1 and env(workload)["NCCL_SOCKET_IFNAME"] == "bond0"


def test_pods_are_restricted_and_carry_no_service_account_token():
    _, _, workload = render()
    spec = pod(workload)["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "fsGroupChangePolicy": "OnRootMismatch",
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert trainer(workload)["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
    }


def test_a_fabric_resource_never_changes_the_gpu_count():
    job = parse_job(apply_case(BASE, {"set": {"spec.network": {"fabric": "infiniband"}}}))
    from longctx_operator.render import fabrics

    profile = fabrics.fabric_profile(job.spec, OperatorConfig())
    hostile = dataclasses.replace(profile, resources={"nvidia.com/gpu": "0"})
    assert workload_module._resources(job.spec, hostile, OperatorConfig())["limits"]["nvidia.com/gpu"] == "8"


def test_render_cli_prints_yaml_kubectl_accepts(capsys):
    assert main(["render", str(EXAMPLES[0]), "--namespace", "ns1", "--generation", "2"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["kind"] for d in docs] == ["Service", "ConfigMap", "Job"]
    assert all(d["metadata"]["namespace"] == "ns1" for d in docs)
    assert docs[2]["metadata"]["name"].endswith("-g2")


def test_in_place_restart_renders_rank0s_restart_coordinator_and_opens_nothing_else():
    """Off: no variable (the launcher restarts nothing). On: rank 0's name, as the JAX coordinator's,
    with network.restartPort, and the budget; the gang's NetworkPolicy already admits the gang on
    any port and adds no rule for it."""
    _, _, off = render()
    assert "LONGCTX_RESTART_ADDRESS" not in env(off) and "LONGCTX_IN_PLACE_RESTARTS" not in env(off)
    _, _, on = render({"spec.restartPolicy": {"inPlace": True, "maxInPlaceRestarts": 5}})
    values = env(on)
    coordinator_host = values["JAX_COORDINATOR_ADDRESS"].rsplit(":", 1)[0]
    assert values["LONGCTX_RESTART_ADDRESS"] == f"{coordinator_host}:8477"
    assert values["LONGCTX_IN_PLACE_RESTARTS"] == "5"
    config = OperatorConfig.model_validate({"gangNetworkPolicy": {"enabled": True}})
    job = parse_job(apply_case(BASE, {"set": {"spec.restartPolicy": {"inPlace": True}}}))
    policy = render_workload(job, LAYOUT, 1, config).network_policy
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {"matchLabels": {"longctx.io/job-name": "job"}}}]}]
