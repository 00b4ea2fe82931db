"""Network traffic staged through host memory: a node's GPU <-> NIC paths without
GPUDirect RDMA.

With GPUDirect RDMA the NIC reads a GPU's send buffer and writes its receive buffer
directly (NCCL/RCCL net transport, `NCCL_DIRECT_NIC`: the FIFO buffers live in GPU
memory). Without it the library places those buffers in pinned host memory
(src/transport/net.cc sendProxySetup / recvProxySetup: `NCCL_NET_MAP_HOSTMEM` when
`useGdr` is 0): the sending GPU's kernel writes each chunk over its own CPU link into host
memory, the NIC reads it from there; on the receiving node the NIC writes into host
memory and the receiving GPU's kernel reads it over its CPU link. No extra CPU copy is
made, but every network byte crosses the GPU <-> CPU link on both nodes, and the NIC's
own path to host memory (on Frontier: NIC -> the GCD it hangs off -> that GCD's
Infinity Fabric link to the CPU).

Whether a job gets GPUDirect RDMA is the library's decision at communicator creation
(paths.cc `ncclTopoCheckGdr`): the GPU-NIC path type must be within `NCCL_NET_GDR_LEVEL`
(default PXB, a shared PCIe switch). On Frontier RCCL sees every GCD-NIC path as PHB
(through the CPU: rome_models.cc model 63/74 records `gdrLevel` PHB for each GCD and its
NIC; tools/topo_expl/models/topo_8p1h_3.xml, the EX235a node, lists GCDs and NICs as
separate devices directly under the CPU's root complexes), so without
`NCCL_NET_GDR_LEVEL=PHB` (or 3) RCCL 2.13-2.18 turns GPUDirect RDMA off: its AMD-Rome
exception (which Trento, family 0x19, takes: topo.cc "Treat Milan also as Rome") only
applies when both the GPU and the NIC sit two links below the same CPU (a PCIe switch in
between), and here each is one link below it.

`stage_through_host` rewrites a node template's GPU -> NIC and NIC -> GPU paths through
the GPU's host CPU; everything else (GPU <-> GPU paths, the NIC each GPU uses) is kept.
"""

from __future__ import annotations

from dataclasses import replace

from topologies.errors import TopologyError
from topologies.nodes import NodeTemplate
from topologies.paths import adjacency_from_links, tree_path, widest_shortest_tree
from topologies.types import DeviceKind, device_kind_code


def stage_through_host(template: NodeTemplate) -> NodeTemplate:
    """`template` with every GPU <-> NIC path going through host memory: GPU -> its CPU ->
    the NIC, and the NIC -> that CPU -> GPU (the widest-shortest local paths, as the
    template's own). The GPU's CPU is the one it reaches in the fewest hops over the
    widest path, the lowest numbered of equals. TopologyError if the node has no CPU."""
    kinds = template.device_kind.tolist()
    cpus = [d for d, k in enumerate(kinds) if k == device_kind_code(DeviceKind.CPU)]
    if not cpus:
        raise TopologyError(
            f"node '{template.name}' has no CPU to stage network traffic through "
            "(cluster.gpudirect_rdma: false needs one)"
        )
    src = template.link_src.tolist()
    adj = adjacency_from_links(
        template.num_devices, src, template.link_dst.tolist(), template.link_bandwidth_Bps.tolist()
    )
    trees: dict[int, list[int]] = {}

    def path(a: int, b: int) -> tuple[int, ...]:
        if a not in trees:
            trees[a] = widest_shortest_tree(adj, a)
        p = tree_path(trees[a], src, a, b)
        if p is None:
            raise TopologyError(f"node '{template.name}': no path from device {a} to {b}")
        return p

    def host_of(gpu: int) -> int:
        return min(
            cpus,
            key=lambda c: (
                len(path(gpu, c)),
                -template.path_bottleneck_Bps(path(gpu, c)),
                c,
            ),
        )

    paths = dict(template.paths)
    for g, k in zip(template.gpus, template.gpu_nic, strict=True):
        nic, cpu = template.nics[k], host_of(g)
        paths[(g, nic)] = path(g, cpu) + path(cpu, nic)
        paths[(nic, g)] = path(nic, cpu) + path(cpu, g)
    return replace(template, paths=paths)
