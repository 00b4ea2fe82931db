"""Node builders: the devices and links inside one compute node, with local routes.

Each `build_*_node` is a pure function returning a `NodeTemplate`, which machine builders
tile once per node (numpy, no per-node Python work). Bandwidths are per direction and come
from reference/hardware.md; every cable becomes two directed links. `bandwidth_scale`
multiplies every intra-node link (the `intra_node_bandwidth_scale` what-if); `nics` sets
the number of NICs in use (fewer than the preset: GPUs share NICs).

Per-hop latencies (not published as such; typical one-way figures, documented choices):

==============================  ========  =============================================
link                            latency   why
==============================  ========  =============================================
NVLink GPU-GPU (direct)         0.5 us    NVLink 3/4 one-hop load-to-use ~0.5 us
GPU <-> NVSwitch                0.35 us   two of them per GPU-GPU hop (0.7 us)
Infinity Fabric GCD-GCD/CPU     0.5 us    xGMI, like NVLink
PCIe (GPU/NIC/CPU)              0.75 us   PCIe Gen3-5 hop including a root/switch
NVLink-C2C (Grace-Hopper)       0.3 us    on-package
==============================  ========  =============================================

NIC choice: NIC k is attached to a fixed host device (the preset's wiring, e.g. Frontier's
hsn0..3 on GCDs 1/3/5/7). Each GPU, in order, uses the NIC it reaches in the fewest hops,
then over the widest path, then the least used so far, then the lowest number. With the
preset NIC count this gives the documented affinity (Frontier GCD 0 uses the NIC on GCD 1
over the 200 GB/s link); with fewer NICs it shares them evenly (one NIC: all use NIC 0).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from topologies.errors import TopologyError
from topologies.paths import adjacency_from_links, tree_path, widest_shortest_tree
from topologies.types import DeviceKind, LinkKind, device_kind_code, link_kind_code

NVLINK_LATENCY_US = 0.5
NVSWITCH_PORT_LATENCY_US = 0.35
XGMI_LATENCY_US = 0.5
PCIE_LATENCY_US = 0.75
C2C_LATENCY_US = 0.3

PCIE_GEN3_GBps = 16.0  # x16, per direction
PCIE_GEN4_GBps = 32.0
PCIE_GEN5_GBps = 64.0
FRONTIER_NIC_ESM_GBps = 50.0  # PCIe Gen4 ESM between a GCD and its Slingshot NIC
FRONTIER_CPU_GCD_GBps = 36.0

FRONTIER_XGMI_GBps: Mapping[tuple[int, int], float] = {
    (0, 1): 200, (2, 3): 200, (4, 5): 200, (6, 7): 200,  # the 4 MI250X packages
    (0, 2): 50, (1, 3): 50, (1, 5): 50, (3, 7): 50, (4, 6): 50, (5, 7): 50,
    (0, 6): 100, (2, 4): 100,
}  # fmt: skip
"""Frontier GCD-GCD Infinity Fabric, GB/s per direction (hardware.md); absent = no link."""

FRONTIER_NIC_HOSTS = (1, 3, 5, 7, 0, 2, 4, 6)
"""GCD hosting NIC k: hsn0..hsn3 on GCDs 1/3/5/7; further NICs (what-if) on the others."""


@dataclass(frozen=True, eq=False)
class NodeTemplate:
    """One node type: local devices, directed links and the local routing table.

    Local device and link indices are positions in these arrays; a machine builder offsets
    them by node. `paths[(a, b)]` is the local link path between two GPUs, from a GPU to
    its NIC and from a NIC to each GPU using it.
    """

    name: str
    device_kind: np.ndarray  # int8 codes into DEVICE_KINDS
    device_local_index: np.ndarray  # int32, index among the node's devices of that kind
    link_src: np.ndarray  # int64 local device index
    link_dst: np.ndarray  # int64 local device index
    link_kind: np.ndarray  # int8 codes into LINK_KINDS
    link_bandwidth_Bps: np.ndarray  # float64
    link_latency_s: np.ndarray  # float64
    gpus: tuple[int, ...]  # local device index of GPU g
    nics: tuple[int, ...]  # local device index of NIC k
    gpu_nic: tuple[int, ...]  # NIC number used by GPU g
    package_size: int
    paths: Mapping[tuple[int, int], tuple[int, ...]]

    @property
    def num_devices(self) -> int:
        return int(self.device_kind.shape[0])

    @property
    def num_links(self) -> int:
        return int(self.link_src.shape[0])

    @property
    def gpus_per_node(self) -> int:
        return len(self.gpus)

    @property
    def nics_per_node(self) -> int:
        return len(self.nics)

    def path_bottleneck_Bps(self, path: tuple[int, ...]) -> float:
        """Smallest bandwidth along a local link path."""
        return float(self.link_bandwidth_Bps[list(path)].min()) if path else float("inf")


class _Sketch:
    """Accumulates devices and cables of a node, then computes its routing table."""

    def __init__(self, name: str, bandwidth_scale: float) -> None:
        self.name = name
        self.scale = bandwidth_scale
        self.kinds: list[DeviceKind] = []
        self.local: list[int] = []
        self.links: list[tuple[int, int, LinkKind, float, float]] = []

    def add(self, kind: DeviceKind, count: int) -> list[int]:
        """Add `count` devices of a kind; returns their local device indices."""
        first = sum(1 for k in self.kinds if k == kind)
        ids = list(range(len(self.kinds), len(self.kinds) + count))
        self.kinds.extend([kind] * count)
        self.local.extend(range(first, first + count))
        return ids

    def cable(
        self, a: int, b: int, kind: LinkKind, bandwidth_GBps: float, latency_us: float
    ) -> None:
        """A bidirectional cable: two directed links with the same per-direction rate."""
        bw = bandwidth_GBps * 1e9 * self.scale
        self.links.append((a, b, kind, bw, latency_us * 1e-6))
        self.links.append((b, a, kind, bw, latency_us * 1e-6))

    def finish(self, gpus: list[int], nics: list[int], package_size: int) -> NodeTemplate:
        src = np.array([lk[0] for lk in self.links], dtype=np.int64)
        dst = np.array([lk[1] for lk in self.links], dtype=np.int64)
        bw = np.array([lk[3] for lk in self.links], dtype=np.float64)
        adj = adjacency_from_links(len(self.kinds), src.tolist(), dst.tolist(), bw.tolist())
        src_list = src.tolist()
        trees = {d: widest_shortest_tree(adj, d) for d in (*gpus, *nics)}

        def path(a: int, b: int) -> tuple[int, ...]:
            p = tree_path(trees[a], src_list, a, b)
            if p is None:
                raise TopologyError(f"node '{self.name}': no path from device {a} to {b}")
            return p

        paths = {(a, b): path(a, b) for a in gpus for b in gpus if a != b}
        load = [0] * len(nics)
        gpu_nic: list[int] = []
        for g in gpus:
            options = []
            for k, nic in enumerate(nics):
                p = path(g, nic)
                options.append((len(p), -float(bw[list(p)].min()), load[k], k))
            k = min(options)[3]
            load[k] += 1
            gpu_nic.append(k)
            paths[(g, nics[k])] = path(g, nics[k])
            paths[(nics[k], g)] = path(nics[k], g)
        return NodeTemplate(
            name=self.name,
            device_kind=np.array([device_kind_code(k) for k in self.kinds], dtype=np.int8),
            device_local_index=np.array(self.local, dtype=np.int32),
            link_src=src,
            link_dst=dst,
            link_kind=np.array([link_kind_code(lk[2]) for lk in self.links], dtype=np.int8),
            link_bandwidth_Bps=bw,
            link_latency_s=np.array([lk[4] for lk in self.links], dtype=np.float64),
            gpus=tuple(gpus),
            nics=tuple(nics),
            gpu_nic=tuple(gpu_nic),
            package_size=package_size,
            paths=paths,
        )


def _check(name: str, nics: int, max_nics: int, bandwidth_scale: float) -> None:
    if isinstance(nics, bool) or not isinstance(nics, int) or not 1 <= nics <= max_nics:
        raise TopologyError(
            f"nics_per_node must be an integer in 1..{max_nics} for {name} nodes, got {nics!r}"
        )
    if not bandwidth_scale > 0 or bandwidth_scale == float("inf"):
        raise TopologyError(
            f"intra_node_bandwidth_scale must be positive and finite, got {bandwidth_scale!r}"
        )


def build_perlmutter_node(*, nics: int = 4, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """A Perlmutter GPU node: 4 A100 all-to-all over NVLink 3, 4 NICs, 1 CPU.

    Devices: gpu0..3, cpu0, nic0..nics-1. Links: NVLink 100 GB/s per direction per GPU pair
    (4 links x 25 GB/s); PCIe Gen4 x16 (32 GB/s) GPU k <-> CPU and GPU k <-> NIC k.
    """
    _check("perlmutter", nics, 4, bandwidth_scale)
    s = _Sketch("perlmutter", bandwidth_scale)
    gpus = s.add(DeviceKind.GPU, 4)
    (cpu,) = s.add(DeviceKind.CPU, 1)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for i in range(4):
        for j in range(i + 1, 4):
            s.cable(gpus[i], gpus[j], LinkKind.NVLINK, 100.0, NVLINK_LATENCY_US)
        s.cable(gpus[i], cpu, LinkKind.PCIE, PCIE_GEN4_GBps, PCIE_LATENCY_US)
    for k, nic in enumerate(nic_ids):
        s.cable(gpus[k], nic, LinkKind.PCIE, PCIE_GEN4_GBps, PCIE_LATENCY_US)
    return s.finish(gpus, nic_ids, package_size=1)


def build_frontier_node(*, nics: int = 4, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """A Frontier node: 8 MI250X GCDs on the exact Infinity Fabric matrix, 4 NICs, 1 CPU.

    Devices: gpu0..7 (GCDs), cpu0, nic0..nics-1. GCD-GCD links follow FRONTIER_XGMI_GBps
    (4 package pairs at 200 GB/s; no direct G0-G3 link); CPU-GCD 36 GB/s each; NIC k on
    GCD FRONTIER_NIC_HOSTS[k] (1, 3, 5, 7) over PCIe Gen4 ESM at 50 GB/s. Package size 2.
    """
    _check("frontier", nics, 8, bandwidth_scale)
    s = _Sketch("frontier", bandwidth_scale)
    gpus = s.add(DeviceKind.GPU, 8)
    (cpu,) = s.add(DeviceKind.CPU, 1)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for (a, b), bw in FRONTIER_XGMI_GBps.items():
        s.cable(gpus[a], gpus[b], LinkKind.XGMI, bw, XGMI_LATENCY_US)
    for g in gpus:
        s.cable(g, cpu, LinkKind.XGMI, FRONTIER_CPU_GCD_GBps, XGMI_LATENCY_US)
    for k, nic in enumerate(nic_ids):
        s.cable(
            gpus[FRONTIER_NIC_HOSTS[k]], nic, LinkKind.PCIE, FRONTIER_NIC_ESM_GBps, PCIE_LATENCY_US
        )
    return s.finish(gpus, nic_ids, package_size=2)


def build_alps_node(*, nics: int = 4, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """An Alps node: 4 GH200, Hopper GPUs all-to-all over NVLink 4, NICs on the Grace side.

    Devices: gpu0..3, cpu0..3 (Grace k of GH200 k), nic0..nics-1. Links: NVLink 150 GB/s per
    GPU pair; NVLink-C2C 450 GB/s GPU k <-> CPU k; NIC k on CPU k over PCIe Gen5 (64 GB/s).
    Grace-Grace links are not modelled (GPU traffic to a remote NIC crosses NVLink).
    """
    _check("alps", nics, 4, bandwidth_scale)
    s = _Sketch("alps", bandwidth_scale)
    gpus = s.add(DeviceKind.GPU, 4)
    cpus = s.add(DeviceKind.CPU, 4)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for i in range(4):
        for j in range(i + 1, 4):
            s.cable(gpus[i], gpus[j], LinkKind.NVLINK, 150.0, NVLINK_LATENCY_US)
        s.cable(gpus[i], cpus[i], LinkKind.C2C, 450.0, C2C_LATENCY_US)
    for k, nic in enumerate(nic_ids):
        s.cable(cpus[k], nic, LinkKind.PCIE, PCIE_GEN5_GBps, PCIE_LATENCY_US)
    return s.finish(gpus, nic_ids, package_size=1)


def build_dgx_node(*, nics: int = 8, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """A DGX H100/H200 node: 8 GPUs on one NVSwitch device, 8 NICs, 2 CPUs.

    Devices: gpu0..7, switch0 (the NVSwitch complex, non-blocking), cpu0..1, nic0..nics-1.
    Links: GPU <-> NVSwitch 450 GB/s per direction; NIC k (ConnectX-7) on GPU k's PCIe Gen5
    (64 GB/s); CPU c <-> GPUs 4c..4c+3 over PCIe Gen5.
    """
    _check("dgx", nics, 8, bandwidth_scale)
    s = _Sketch("dgx", bandwidth_scale)
    gpus = s.add(DeviceKind.GPU, 8)
    (nvswitch,) = s.add(DeviceKind.SWITCH, 1)
    cpus = s.add(DeviceKind.CPU, 2)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for i, g in enumerate(gpus):
        s.cable(g, nvswitch, LinkKind.NVLINK, 450.0, NVSWITCH_PORT_LATENCY_US)
        s.cable(g, cpus[i // 4], LinkKind.PCIE, PCIE_GEN5_GBps, PCIE_LATENCY_US)
    for k, nic in enumerate(nic_ids):
        s.cable(gpus[k], nic, LinkKind.PCIE, PCIE_GEN5_GBps, PCIE_LATENCY_US)
    return s.finish(gpus, nic_ids, package_size=1)


def build_dgx_a100_node(*, nics: int = 8, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """A DGX A100 node: 8 A100s on NVSwitch (NVLink 3: 12 links x 25 GB/s = 300 GB/s per
    direction per GPU), 8 HDR NICs (200 Gb/s = 25 GB/s) on the GPUs' PCIe Gen4 switches,
    2 CPUs. (NVIDIA DGX A100 system description; the node Vidur's A100 data was taken on.)
    """
    _check("dgx-a100", nics, 8, bandwidth_scale)
    s = _Sketch("dgx-a100", bandwidth_scale)
    gpus = s.add(DeviceKind.GPU, 8)
    (nvswitch,) = s.add(DeviceKind.SWITCH, 1)
    cpus = s.add(DeviceKind.CPU, 2)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for i, g in enumerate(gpus):
        s.cable(g, nvswitch, LinkKind.NVLINK, 300.0, NVSWITCH_PORT_LATENCY_US)
        s.cable(g, cpus[i // 4], LinkKind.PCIE, PCIE_GEN4_GBps, PCIE_LATENCY_US)
    for k, nic in enumerate(nic_ids):
        s.cable(gpus[k], nic, LinkKind.PCIE, PCIE_GEN4_GBps, PCIE_LATENCY_US)
    return s.finish(gpus, nic_ids, package_size=1)


def build_frontera_rtx_node(*, nics: int = 1, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """A Frontera GPU node: 4 Quadro RTX 5000 on PCIe 3.0, one HDR100 NIC.

    Devices: gpu0..3, cpu0 (standing for the host's PCIe root / switch), nic0..nics-1.
    Links: PCIe 3.0 x16 (16 GB/s) GPU <-> CPU and NIC <-> CPU; GPU-GPU traffic crosses the
    root (2 hops, 16 GB/s); no NVLink.
    """
    _check("frontera-rtx", nics, 4, bandwidth_scale)
    s = _Sketch("frontera-rtx", bandwidth_scale)
    gpus = s.add(DeviceKind.GPU, 4)
    (cpu,) = s.add(DeviceKind.CPU, 1)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for g in gpus:
        s.cable(g, cpu, LinkKind.PCIE, PCIE_GEN3_GBps, PCIE_LATENCY_US)
    for nic in nic_ids:
        s.cable(cpu, nic, LinkKind.PCIE, PCIE_GEN3_GBps, PCIE_LATENCY_US)
    return s.finish(gpus, nic_ids, package_size=1)


CPU_HOST_RANKS = 32
"""Rank slots of a cpu-host node (torch4d refuses more processes on one CPU host)."""
LOOPBACK_GBps = 5.0  # placeholder: a memcpy-bound loopback TCP stream, per direction
LOOPBACK_LATENCY_US = 10.0  # placeholder: a loopback send/recv through the kernel


def build_cpu_host_node(*, nics: int = 1, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """One CPU host running up to 32 ranks as processes (PyTorch CPU / gloo runs).

    Devices: gpu0..31 (rank slots: processes standing in for GPUs), switch0 (the kernel's
    loopback / shared-memory path, non-blocking), cpu0, nic0..nics-1. Links: slot <->
    loopback switch at LOOPBACK_GBps with LOOPBACK_LATENCY_US (kind `local`: a switch
    inside the host); NIC on the CPU over PCIe Gen3. The numbers are nominal placeholders:
    gloo's cost on a host is CPU-bound and is what a calibration file's collective tables
    (fitted from the host's traces) replace. A W-rank run uses slots 0..W-1.
    """
    _check("cpu-host", nics, 4, bandwidth_scale)
    s = _Sketch("cpu-host", bandwidth_scale)
    slots = s.add(DeviceKind.GPU, CPU_HOST_RANKS)
    (loopback,) = s.add(DeviceKind.SWITCH, 1)
    (cpu,) = s.add(DeviceKind.CPU, 1)
    nic_ids = s.add(DeviceKind.NIC, nics)
    for g in slots:
        s.cable(g, loopback, LinkKind.LOCAL, LOOPBACK_GBps, LOOPBACK_LATENCY_US)
    s.cable(loopback, cpu, LinkKind.LOCAL, LOOPBACK_GBps * CPU_HOST_RANKS, LOOPBACK_LATENCY_US)
    for nic in nic_ids:
        s.cable(cpu, nic, LinkKind.PCIE, PCIE_GEN3_GBps, PCIE_LATENCY_US)
    return s.finish(slots, nic_ids, package_size=1)


NODE_BUILDERS: Mapping[str, Callable[..., NodeTemplate]] = {
    "perlmutter": build_perlmutter_node,
    "frontier": build_frontier_node,
    "alps": build_alps_node,
    "dgx": build_dgx_node,
    "dgx-a100": build_dgx_a100_node,
    "frontera-rtx": build_frontera_rtx_node,
    "cpu-host": build_cpu_host_node,
}
"""Node builders by the `node` field of machines.yaml."""


def build_node(node_type: str, *, nics: int, bandwidth_scale: float = 1.0) -> NodeTemplate:
    """The template of a node type named in machines.yaml (TopologyError if unknown)."""
    builder = NODE_BUILDERS.get(node_type)
    if builder is None:
        raise TopologyError(f"unknown node type '{node_type}' (known: {', '.join(NODE_BUILDERS)})")
    return builder(nics=nics, bandwidth_scale=bandwidth_scale)
