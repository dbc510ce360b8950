"""The hardware catalogue: every GPU and network fabric longctx knows, as plain data (no JAX).

This is the one place a GPU or a fabric is described. The operator derives from it the API's
`gpuType` and `fabric` values, the CEL rules about fabrics, the node selector's GPU product label
and the planner's figures; the trainer reads its MFU peaks from it. A fabric also needs a render
profile (its pod settings) in `longctx_operator.render.fabrics`; a test fails until it has one.

Numbers are public spec-sheet figures (cited per entry). Bandwidths are bytes per second in one
direction. Spec sheets quote NVLink as the bidirectional total per GPU, so those figures are
halved here. Memory sizes sold as "GB" are taken as GiB: that is what the cards expose
(`nvidia-smi` shows 81920 MiB on an A100 80GB); the planner's memory margin leaves room for the
CUDA context and the runtime's reserve. FLOP/s peaks are dense (no structured sparsity).

The `*_efficiency` fields turn peak figures into sustained ones for the planner's step-time
estimate; they are deliberately round numbers, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

GIB = 1024**3
GB = 10**9
TERA = 10**12

CPU = "cpu"
"""The `gpuType` of jobs that run on XLA host devices instead of GPUs (gpusPerNode then counts
emulated devices per pod). It is no GPU: it has no entry below and the planner does not model it."""


@dataclass(frozen=True)
class Gpu:
    name: str
    """The API's spelling (`spec.resources.gpuType`)."""
    product: str
    """GPU Feature Discovery's `nvidia.com/gpu.product` label of nodes with this GPU."""
    device_kind: str
    """What JAX's `Device.device_kind` contains on this GPU (upper case), e.g. "H100"."""
    bf16_flops: float
    """Dense bf16 tensor-core peak, FLOP/s."""
    fp8_flops: float | None
    """Dense FP8 tensor-core peak, FLOP/s; None where the GPU has no FP8 tensor cores."""
    hbm_bytes: int
    hbm_bandwidth: float
    """Bytes/s."""
    host_link: str
    """Human name of the GPU<->host link."""
    host_link_bandwidth: float
    """Bytes/s, one direction."""
    nvlink_bandwidth: float
    """Bytes/s, one direction, per GPU."""
    matmul_efficiency: float = 0.5
    """Sustained fraction of the bf16 peak in large matmuls and attention."""
    link_efficiency: float = 0.8
    """Sustained fraction of NVLink and host-link bandwidth."""
    memory_factor: float = 1.0
    """Measured peak device memory over the planner's count (allocator slack, XLA temporaries)."""
    calibrated: str | None = None
    """Date and device of the measured runs `matmul_efficiency` and `memory_factor` were fitted
    to (benchmarks/calibrate_planner.py); None: the defaults above, never fitted."""

    @property
    def achievable_flops(self) -> float:
        return self.bf16_flops * self.matmul_efficiency

    @property
    def achievable_fp8_flops(self) -> float | None:
        return self.fp8_flops * self.matmul_efficiency if self.fp8_flops else None

    @property
    def achievable_nvlink(self) -> float:
        return self.nvlink_bandwidth * self.link_efficiency

    @property
    def achievable_host_link(self) -> float:
        return self.host_link_bandwidth * self.link_efficiency


# PCIe x16 per direction: Gen4 16 GT/s * 16 lanes (128b/130b) ~ 32 GB/s; Gen5 ~ 64 GB/s.
_PCIE4_X16 = 32 * GB
_PCIE5_X16 = 64 * GB

GPUS: dict[str, Gpu] = {
    # NVIDIA A100 datasheet (SXM): 312 TFLOPS bf16 dense, no FP8, 1,555 GB/s (40GB) / 2,039 GB/s
    # (80GB) HBM2e, NVLink 3 600 GB/s bidirectional, PCIe Gen4.
    "a100-40gb": Gpu(
        "a100-40gb",
        "NVIDIA-A100-SXM4-40GB",
        "A100",
        312 * TERA,
        None,
        40 * GIB,
        1555 * GB,
        "PCIe Gen4 x16",
        _PCIE4_X16,
        300 * GB,
    ),
    "a100-80gb": Gpu(
        "a100-80gb",
        "NVIDIA-A100-SXM4-80GB",
        "A100",
        312 * TERA,
        None,
        80 * GIB,
        2039 * GB,
        "PCIe Gen4 x16",
        _PCIE4_X16,
        300 * GB,
    ),
    # NVIDIA H100 datasheet (SXM5): 989 TFLOPS bf16 dense (1,979 with sparsity), 1,979 TFLOPS FP8
    # dense, 3.35 TB/s HBM3, NVLink 4 900 GB/s bidirectional, PCIe Gen5.
    "h100-80gb": Gpu(
        "h100-80gb",
        "NVIDIA-H100-80GB-HBM3",
        "H100",
        989 * TERA,
        1979 * TERA,
        80 * GIB,
        3350 * GB,
        "PCIe Gen5 x16",
        _PCIE5_X16,
        450 * GB,
    ),
    # NVIDIA H200 datasheet (SXM): same compute as H100, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s.
    "h200-141gb": Gpu(
        "h200-141gb",
        "NVIDIA-H200",
        "H200",
        989 * TERA,
        1979 * TERA,
        141 * GIB,
        4800 * GB,
        "PCIe Gen5 x16",
        _PCIE5_X16,
        450 * GB,
    ),
    # NVIDIA HGX B200 spec sheet: 2.25 PFLOPS bf16 and 4.5 PFLOPS FP8 dense per GPU, 180 GB HBM3e
    # at 8 TB/s, NVLink 5 1.8 TB/s bidirectional, PCIe Gen5 to the host CPU.
    "b200-180gb": Gpu(
        "b200-180gb",
        "NVIDIA-B200",
        "B200",
        2250 * TERA,
        4500 * TERA,
        180 * GIB,
        8000 * GB,
        "PCIe Gen5 x16",
        _PCIE5_X16,
        900 * GB,
    ),
}


def gpu_of_device_kind(device_kind: str) -> Gpu | None:
    """The catalogue's GPU a JAX device of this kind is (A100 40GB and 80GB share their peaks)."""
    return next((g for g in GPUS.values() if g.device_kind in device_kind.upper()), None)


@dataclass(frozen=True)
class Fabric:
    name: str
    """The API's spelling (`spec.network.fabric`)."""
    description: str
    bandwidth_per_gpu: float
    """Bytes/s, one direction: the node's NIC bandwidth divided by its GPUs."""
    efficiency: float
    """Sustained fraction of bandwidth_per_gpu in large collectives."""
    rdma: Literal["verbs", "libfabric"] | None = None
    """How GPUs reach the NICs directly (GPUDirect RDMA): InfiniBand verbs, or libfabric (EFA);
    None on socket fabrics. Only RDMA carries NVSHMEM between nodes, and registering memory for
    RDMA needs the IPC_LOCK capability."""
    gpu_nic_networks: int | None = None
    """Exactly this many `network.networks` (one per GPU NIC) are required; None: no such rule."""
    gpu_types: tuple[str, ...] | None = None
    """The only GPU types whose machines offer this fabric; None: any."""

    @property
    def achievable_bandwidth(self) -> float:
        return self.bandwidth_per_gpu * self.efficiency

    @property
    def capabilities(self) -> tuple[str, ...]:
        """Linux capabilities the trainer container needs on this fabric."""
        return ("IPC_LOCK",) if self.rdma else ()


def _gbit(gbit_per_second: float) -> float:
    return gbit_per_second * GB / 8


FABRICS: dict[str, Fabric] = {
    # A single 100 GbE NIC per node shared by 8 GPUs, kernel TCP sockets.
    "tcp": Fabric("tcp", "TCP sockets, 100 GbE per node", _gbit(100 / 8), 0.6),
    # DGX H100 reference: one ConnectX-7 NDR 400 Gb/s InfiniBand HCA per GPU.
    "infiniband": Fabric("infiniband", "InfiniBand NDR, 400 Gb/s per GPU", _gbit(400), 0.8, rdma="verbs"),
    # RoCEv2 with one 400 GbE ConnectX-7 (or BlueField-3) per GPU, e.g. Spectrum-X.
    "roce": Fabric("roce", "RoCEv2, 400 GbE per GPU", _gbit(400), 0.75, rdma="verbs"),
    # AWS p5.48xlarge: 3,200 Gbps EFA v2 per instance for 8 H100.
    "efa": Fabric("efa", "AWS EFA, 3200 Gbps per 8 GPUs", _gbit(3200 / 8), 0.7, rdma="libfabric"),
    # GCP A3 High: 4 x 200 Gbps NICs with GPUDirect-TCPX for 8 H100.
    "gcp-tcpx": Fabric(
        "gcp-tcpx",
        "GCP A3 High GPUDirect-TCPX, 800 Gbps per 8 GPUs",
        _gbit(800 / 8),
        0.7,
        gpu_nic_networks=4,
        gpu_types=("h100-80gb",),
    ),
    # GCP A3 Mega: 8 x 200 Gbps NICs with GPUDirect-TCPXO for 8 H100.
    "gcp-tcpxo": Fabric(
        "gcp-tcpxo",
        "GCP A3 Mega GPUDirect-TCPXO, 1600 Gbps per 8 GPUs",
        _gbit(1600 / 8),
        0.7,
        gpu_nic_networks=8,
        gpu_types=("h100-80gb",),
    ),
    # GCP A3 Ultra (H200) and A4 (B200): 8 x 400 Gbps ConnectX-7 RoCE NICs (GPUDirect RDMA).
    "gcp-rdma": Fabric(
        "gcp-rdma",
        "GCP A3 Ultra GPUDirect-RDMA, 3200 Gbps per 8 GPUs",
        _gbit(3200 / 8),
        0.8,
        rdma="verbs",
        gpu_nic_networks=8,
        gpu_types=("h200-141gb", "b200-180gb"),
    ),
}
