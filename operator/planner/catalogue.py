"""GPU and network-fabric catalogue used by the planner.

Numbers are public spec-sheet figures (cited per entry). Bandwidths are bytes per second in one
direction. Spec sheets quote NVLink as the bidirectional total per GPU, so those figures are
halved here. Memory sizes sold as "GB" are taken as GiB: that is what the cards expose
(`nvidia-smi` shows 81920 MiB on an A100 80GB); the planner's memory margin leaves room for the
CUDA context and the runtime's reserve.

The `*_efficiency` fields turn peak figures into sustained ones for the step-time estimate; they
are deliberately round numbers, not measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1024**3
GB = 10**9
TERA = 10**12


@dataclass(frozen=True)
class GpuSpec:
    name: str
    bf16_flops: float  # dense (no structured sparsity) bf16 tensor-core peak, FLOP/s
    hbm_bytes: int
    hbm_bandwidth: float  # bytes/s
    host_link: str  # human name of the GPU<->host link
    host_link_bandwidth: float  # bytes/s, one direction
    nvlink_bandwidth: float  # bytes/s, one direction, per GPU
    matmul_efficiency: float = 0.5  # sustained fraction of bf16 peak in large matmuls/attention
    link_efficiency: float = 0.8  # sustained fraction of NVLink and host-link bandwidth

    @property
    def achievable_flops(self) -> float:
        return self.bf16_flops * self.matmul_efficiency

    @property
    def achievable_nvlink(self) -> float:
        return self.nvlink_bandwidth * self.link_efficiency

    @property
    def achievable_host_link(self) -> float:
        return self.host_link_bandwidth * self.link_efficiency


# PCIe x16 per direction: Gen4 16 GT/s * 16 lanes (128b/130b) ~ 32 GB/s; Gen5 ~ 64 GB/s.
_PCIE4_X16 = 32 * GB
_PCIE5_X16 = 64 * GB

GPUS: dict[str, GpuSpec] = {
    # NVIDIA A100 datasheet (SXM): 312 TFLOPS bf16 dense, 1,555 GB/s (40GB) / 2,039 GB/s (80GB)
    # HBM2e, NVLink 3 600 GB/s bidirectional, PCIe Gen4.
    "a100-40gb": GpuSpec("a100-40gb", 312 * TERA, 40 * GIB, 1555 * GB, "PCIe Gen4 x16",
                         _PCIE4_X16, 300 * GB),
    "a100-80gb": GpuSpec("a100-80gb", 312 * TERA, 80 * GIB, 2039 * GB, "PCIe Gen4 x16",
                         _PCIE4_X16, 300 * GB),
    # NVIDIA H100 datasheet (SXM5): 989 TFLOPS bf16 dense (1,979 with sparsity), 3.35 TB/s HBM3,
    # NVLink 4 900 GB/s bidirectional, PCIe Gen5.
    "h100-80gb": GpuSpec("h100-80gb", 989 * TERA, 80 * GIB, 3350 * GB, "PCIe Gen5 x16",
                         _PCIE5_X16, 450 * GB),
    # NVIDIA H200 datasheet (SXM): same compute as H100, 141 GB HBM3e at 4.8 TB/s, NVLink 900 GB/s.
    "h200-141gb": GpuSpec("h200-141gb", 989 * TERA, 141 * GIB, 4800 * GB, "PCIe Gen5 x16",
                          _PCIE5_X16, 450 * GB),
    # NVIDIA HGX B200 spec sheet: 2.25 PFLOPS bf16 dense per GPU, 180 GB HBM3e at 8 TB/s,
    # NVLink 5 1.8 TB/s bidirectional, PCIe Gen5 to the host CPU.
    "b200-180gb": GpuSpec("b200-180gb", 2250 * TERA, 180 * GIB, 8000 * GB, "PCIe Gen5 x16",
                          _PCIE5_X16, 900 * GB),
}


@dataclass(frozen=True)
class FabricSpec:
    name: str
    description: str
    bandwidth_per_gpu: float  # bytes/s, one direction, NIC bandwidth divided by GPUs per node
    efficiency: float  # sustained fraction for large collectives

    @property
    def achievable_bandwidth(self) -> float:
        return self.bandwidth_per_gpu * self.efficiency


def _gbit(gbit_per_second: float) -> float:
    return gbit_per_second * GB / 8


FABRICS: dict[str, FabricSpec] = {
    # A single 100 GbE NIC per node shared by 8 GPUs, kernel TCP sockets.
    "tcp": FabricSpec("tcp", "TCP sockets, 100 GbE per node", _gbit(100 / 8), 0.6),
    # DGX H100 reference: one ConnectX-7 NDR 400 Gb/s InfiniBand HCA per GPU.
    "infiniband": FabricSpec("infiniband", "InfiniBand NDR, 400 Gb/s per GPU", _gbit(400), 0.8),
    # RoCEv2 with one 400 GbE ConnectX-7 (or BlueField-3) per GPU, e.g. Spectrum-X.
    "roce": FabricSpec("roce", "RoCEv2, 400 GbE per GPU", _gbit(400), 0.75),
    # AWS p5.48xlarge: 3,200 Gbps EFA v2 per instance for 8 H100.
    "efa": FabricSpec("efa", "AWS EFA, 3200 Gbps per 8 GPUs", _gbit(3200 / 8), 0.7),
    # GCP A3 High: 4 x 200 Gbps NICs with GPUDirect-TCPX for 8 H100.
    "gcp-tcpx": FabricSpec("gcp-tcpx", "GCP A3 High GPUDirect-TCPX, 800 Gbps per 8 GPUs",
                           _gbit(800 / 8), 0.7),
    # GCP A3 Mega: 8 x 200 Gbps NICs with GPUDirect-TCPXO for 8 H100.
    "gcp-tcpxo": FabricSpec("gcp-tcpxo", "GCP A3 Mega GPUDirect-TCPXO, 1600 Gbps per 8 GPUs",
                            _gbit(1600 / 8), 0.7),
    # GCP A3 Ultra: 8 x 400 Gbps ConnectX-7 RoCE NICs (GPUDirect RDMA) for 8 H200.
    "gcp-rdma": FabricSpec("gcp-rdma", "GCP A3 Ultra GPUDirect-RDMA, 3200 Gbps per 8 GPUs",
                           _gbit(3200 / 8), 0.8),
}
