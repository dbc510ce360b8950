"""One profile per network fabric: the pod resources, annotations, sidecars and NCCL env it needs.

Each fabric of the hardware catalogue (`longctx_trainer.contract.hardware`, which says what the fabric is:
RDMA or not, and so its capabilities) has exactly one function here; the pod template only places
what the profile returns. NVSHMEM settings are derived from a profile's NCCL env in `nvshmem.py`.

Host folders (hostPath) are mounted read-only, into the trainer and the sidecars alike, except
those in WRITABLE_HOST_MOUNTS, each for its vendor's reason (docs/security.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from ..api.spec import LongContextJobSpec
from ..config import OperatorConfig

DEFAULT_RDMA_RESOURCE = "rdma/rdma_shared_device_a"
DEFAULT_ROCE_GID_INDEX = 3
EFA_HUGEPAGES = "5120Mi"  # AWS guidance for EFA pods: 5 GiB of 2 MiB huge pages

WRITABLE_HOST_MOUNTS: dict[tuple[str, str], str] = {
    ("tcpx-daemon", "sys"): "the daemon's network tuning writes /sys/module/tcp_cubic/parameters/hystart_detect",
    ("tcpx-daemon", "proc-sys"): "the daemon's network tuning writes TCP sysctls (tcp_rmem, tcp_wmem, "
    "tcp_mtu_probing, tcp_slow_start_after_idle, somaxconn, ...) under /proc/sys",
    ("tcpxo-daemon", "sys"): "the daemon's network tuning writes /sys/module/tcp_cubic/parameters/hystart_detect",
    ("tcpxo-daemon", "proc-sys"): "the daemon's network tuning writes TCP sysctls and each GPU NIC's rp_filter "
    "under /proc/sys",
}
"""(container, volume) of every hostPath mount that is writable, and why: Google's GPUDirect-TCPX(O)
recipes mount the host's /sys and /proc/sys into the receive-datapath daemon (never into the
trainer) for its start-up network tuning. Any other host folder is mounted read-only."""


@dataclass(frozen=True)
class FabricProfile:
    env: dict[str, str] = field(default_factory=dict)
    resources: dict[str, str] = field(default_factory=dict)
    """Extended resources per pod (requests = limits)."""
    annotations: dict[str, str] = field(default_factory=dict)
    volumes: tuple[dict, ...] = ()
    trainer_mounts: tuple[dict, ...] = ()
    sidecars: tuple[dict, ...] = ()
    """Native sidecars: init containers with restartPolicy Always, started before the trainer."""


def _host_path(name: str, path: str) -> dict:
    return {"name": name, "hostPath": {"path": path}}


def _read_only(volume: str, path: str) -> dict:
    return {"name": volume, "mountPath": path, "readOnly": True}


def _mount(sidecar: str, volume: str, path: str) -> dict:
    """A sidecar's mount of a host folder: read-only unless WRITABLE_HOST_MOUNTS says why not."""
    return (
        {"name": volume, "mountPath": path} if (sidecar, volume) in WRITABLE_HOST_MOUNTS else _read_only(volume, path)
    )


# The receive-datapath daemons tune the host's network (sysctls, rp_filter) as root, as in the
# vendor's recipes: the pod's non-root user (trainerUser) would leave a privileged or NET_ADMIN
# container with no effective capabilities. Only these sidecars run as root; the trainer never does.
ROOT_SIDECAR = {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}


def _gke_interfaces(networks: list[str]) -> str:
    nics = [{"interfaceName": "eth0", "network": "default"}]
    nics += [{"interfaceName": f"eth{i + 1}", "network": n} for i, n in enumerate(networks)]
    return json.dumps(nics, separators=(",", ":"))


def _gke_device_injection(gpus: int, extra: tuple[str, ...] = ()) -> str:
    paths = [f"/dev/nvidia{i}" for i in range(gpus)] + ["/dev/nvidiactl", "/dev/nvidia-uvm", *extra]
    return "".join(f"- path: {p}\n" for p in paths)


def _gpu_nic_names(networks: list[str]) -> str:
    return ",".join(f"eth{i + 1}" for i in range(len(networks)))


def tcp(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    return FabricProfile(env={"NCCL_SOCKET_IFNAME": spec.network.socket_interface, "NCCL_IB_DISABLE": "1"})


def _rdma_verbs(spec: LongContextJobSpec, roce: bool) -> FabricProfile:
    """InfiniBand or RoCE through the NVIDIA Network Operator (RDMA device plugin + Multus)."""
    net = spec.network
    env = {"NCCL_NET": "IB", "NCCL_IB_DISABLE": "0", "NCCL_SOCKET_IFNAME": net.socket_interface}
    if net.hcas:
        env["NCCL_IB_HCA"] = ",".join(net.hcas)
    if roce:
        env["NCCL_IB_GID_INDEX"] = str(net.gid_index if net.gid_index is not None else DEFAULT_ROCE_GID_INDEX)
    annotations = {"k8s.v1.cni.cncf.io/networks": ",".join(net.networks)} if net.networks else {}
    return FabricProfile(
        env=env,
        annotations=annotations,
        resources={net.rdma_resource or DEFAULT_RDMA_RESOURCE: str(net.rdma_resource_count)},
    )


def infiniband(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    return _rdma_verbs(spec, roce=False)


def roce(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    return _rdma_verbs(spec, roce=True)


def efa(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    """AWS Elastic Fabric Adapter through the aws-ofi-nccl plugin in the trainer image."""
    return FabricProfile(
        env={
            "FI_PROVIDER": "efa",
            "FI_EFA_USE_DEVICE_RDMA": "1",
            "FI_EFA_FORK_SAFE": "1",
            "FI_EFA_USE_HUGE_PAGE": "0",
            "NCCL_SOCKET_IFNAME": spec.network.socket_interface,
        },
        resources={"vpc.amazonaws.com/efa": str(spec.network.efa_devices_per_node), "hugepages-2Mi": EFA_HUGEPAGES},
    )


def gcp_tcpx(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    """GKE A3 High: GPUDirect-TCPX with the tcpgpudmarxd (RxDM) daemon as a native sidecar."""
    nets = spec.network.networks
    nics = _gpu_nic_names(nets)
    daemon = {
        "name": "tcpx-daemon",
        "image": config.tcpx_daemon_image,
        "restartPolicy": "Always",
        "command": [
            "/tcpgpudmarxd/build/app/tcpgpudmarxd",
            "--gpu_nic_preset",
            "a3vm",
            "--gpu_shmem_type",
            "fd",
            "--uds_path",
            "/run/tcpx",
            "--setup_param",
            "--verbose 128 2 0",
        ],
        "securityContext": {"privileged": True, **ROOT_SIDECAR},
        "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
        "volumeMounts": [
            _mount("tcpx-daemon", "nvidia-libs", "/usr/local/nvidia/lib64"),
            {"name": "tcpx-socket", "mountPath": "/run/tcpx"},
            _mount("tcpx-daemon", "sys", "/hostsysfs"),
            _mount("tcpx-daemon", "proc-sys", "/hostprocsysfs"),
        ],
    }
    return FabricProfile(
        env={
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_GPUDIRECTTCPX_CTRL_DEV": "eth0",
            "NCCL_GPUDIRECTTCPX_SOCKET_IFNAME": nics,
            "NCCL_GPUDIRECTTCPX_UNIX_CLIENT_PREFIX": "/run/tcpx",
            "NCCL_GPUDIRECTTCPX_FORCE_ACK": "0",
            "NCCL_CROSS_NIC": "0",
            "NCCL_ALGO": "Ring",
            "NCCL_PROTO": "Simple",
            "NCCL_NSOCKS_PERTHREAD": "4",
            "NCCL_SOCKET_NTHREADS": "1",
            "NCCL_NET_GDR_LEVEL": "PIX",
            "NCCL_P2P_PXN_LEVEL": "0",
            "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
            "NCCL_P2P_NET_CHUNKSIZE": "524288",
            "NCCL_P2P_PCI_CHUNKSIZE": "524288",
            "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
            "NCCL_BUFFSIZE": "4194304",
            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64",
        },
        annotations={
            "networking.gke.io/default-interface": "eth0",
            "networking.gke.io/interfaces": _gke_interfaces(nets),
            "devices.gke.io/container.tcpx-daemon": _gke_device_injection(spec.resources.gpus_per_node),
        },
        volumes=(
            _host_path("nvidia-libs", "/home/kubernetes/bin/nvidia/lib64"),
            {"name": "tcpx-socket", "emptyDir": {}},
            _host_path("sys", "/sys"),
            _host_path("proc-sys", "/proc/sys"),
        ),
        trainer_mounts=(
            _read_only("nvidia-libs", "/usr/local/nvidia/lib64"),
            {"name": "tcpx-socket", "mountPath": "/run/tcpx"},
        ),
        sidecars=(daemon,),
    )


def gcp_tcpxo(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    """GKE A3 Mega: GPUDirect-TCPXO (FasTrak) with its RxDM daemon as a native sidecar."""
    nets = spec.network.networks
    daemon = {
        "name": "tcpxo-daemon",
        "image": config.tcpxo_daemon_image,
        "restartPolicy": "Always",
        "command": [
            "/bin/sh",
            "-c",
            f"/fts/entrypoint_rxdm_container.sh --num_hops=2 --num_nics={len(nets)} --uid= --alsologtostderr",
        ],
        "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}, **ROOT_SIDECAR},
        "env": [{"name": "LD_LIBRARY_PATH", "value": "/usr/local/nvidia/lib64"}],
        "volumeMounts": [
            _mount("tcpxo-daemon", "nvidia", "/usr/local/nvidia"),
            _mount("tcpxo-daemon", "sys", "/hostsysfs"),
            _mount("tcpxo-daemon", "proc-sys", "/hostprocsysfs"),
        ],
    }
    lib = "/usr/local/nvidia/lib64"
    return FabricProfile(
        env={
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_FASTRAK_CTRL_DEV": "eth0",
            "NCCL_FASTRAK_IFNAME": _gpu_nic_names(nets),
            "NCCL_CROSS_NIC": "0",
            "NCCL_ALGO": "Ring,Tree",
            "NCCL_PROTO": "Simple,LL128",
            "NCCL_MIN_NCHANNELS": "4",
            "NCCL_TUNER_PLUGIN": "libnccl-tuner.so",
            "NCCL_TUNER_CONFIG_PATH": f"{lib}/a3plus_tuner_config.textproto",
            "NCCL_SHIMNET_GUEST_CONFIG_CHECKER_CONFIG_FILE": f"{lib}/a3plus_guest_config.textproto",
            "NCCL_DYNAMIC_CHUNK_SIZE": "524288",
            "NCCL_P2P_NET_CHUNKSIZE": "524288",
            "NCCL_P2P_PCI_CHUNKSIZE": "524288",
            "NCCL_P2P_NVL_CHUNKSIZE": "1048576",
            "NCCL_FASTRAK_NUM_FLOWS": "2",
            "NCCL_FASTRAK_USE_SNAP": "1",
            "NCCL_FASTRAK_PLUGIN_ACCEPT_TIMEOUT_MS": "600000",
            "NCCL_FASTRAK_ENABLE_CONTROL_CHANNEL": "0",
            "NCCL_BUFFSIZE": "8388608",
            "NCCL_FASTRAK_USE_LLCM": "1",
            "NCCL_FASTRAK_LLCM_DEVICE_DIRECTORY": "/dev/aperture_devices",
            "NCCL_NVLS_ENABLE": "0",
            "NCCL_NET_GDR_LEVEL": "PIX",
            "NCCL_P2P_PXN_LEVEL": "0",
            "LD_LIBRARY_PATH": lib,
        },
        annotations={
            "networking.gke.io/default-interface": "eth0",
            "networking.gke.io/interfaces": _gke_interfaces(nets),
            "devices.gke.io/container.tcpxo-daemon": _gke_device_injection(
                spec.resources.gpus_per_node, ("/dev/dmabuf_import_helper",)
            ),
        },
        volumes=(
            _host_path("nvidia", "/home/kubernetes/bin/nvidia"),
            _host_path("sys", "/sys"),
            _host_path("proc-sys", "/proc/sys"),
            _host_path("aperture-devices", "/dev/aperture_devices"),
        ),
        trainer_mounts=(
            _read_only("nvidia", "/usr/local/nvidia"),
            # Device nodes stay usable on a read-only mount: it only stops creating files there.
            _read_only("aperture-devices", "/dev/aperture_devices"),
        ),
        sidecars=(daemon,),
    )


def gcp_rdma(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    """GKE A3 Ultra / A4: RDMA over the ConnectX NICs with Google's gIB NCCL plugin."""
    nets = spec.network.networks
    return FabricProfile(
        env={
            "NCCL_NET": "gIB",
            "NCCL_SOCKET_IFNAME": "eth0",
            "NCCL_CROSS_NIC": "0",
            "NCCL_NET_GDR_LEVEL": "PIX",
            "NCCL_IB_ADAPTIVE_ROUTING": "1",
            "NCCL_IB_QPS_PER_CONNECTION": "4",
            "NCCL_IB_TC": "52",
            "NCCL_IB_FIFO_TC": "84",
            "NCCL_TUNER_CONFIG_PATH": "/usr/local/gib/configs/tuner_config.txtpb",
            "LD_LIBRARY_PATH": "/usr/local/nvidia/lib64:/usr/local/gib/lib64",
        },
        annotations={
            "networking.gke.io/default-interface": "eth0",
            "networking.gke.io/interfaces": _gke_interfaces(nets),
        },
        volumes=(_host_path("nvidia", "/home/kubernetes/bin/nvidia"), _host_path("gib", "/home/kubernetes/bin/gib")),
        trainer_mounts=(
            _read_only("nvidia", "/usr/local/nvidia"),
            _read_only("gib", "/usr/local/gib"),
        ),
    )


PROFILES: dict[str, Callable[[LongContextJobSpec, OperatorConfig], FabricProfile]] = {
    "tcp": tcp,
    "infiniband": infiniband,
    "roce": roce,
    "efa": efa,
    "gcp-tcpx": gcp_tcpx,
    "gcp-tcpxo": gcp_tcpxo,
    "gcp-rdma": gcp_rdma,
}


def fabric_profile(spec: LongContextJobSpec, config: OperatorConfig) -> FabricProfile:
    return PROFILES[spec.network.fabric](spec, config)
