"""InfiniBand-style fat tree (folded Clos): leaves, pod spines, and a core above pods.

Structure (`build_fat_tree`), with `radix` ports per switch at `link_bandwidth`:

- Leaf: d = radix * o / (1 + o) down ports and u = radix - d up ports (o is the leaf
  `oversubscription`, down:up); each down port carries `port_split` endpoints (e.g. an HDR
  port split into two HDR100 node links on Frontera).
- Rail-optimised (`rail_optimized: true`, DGX SuperPOD): NIC k of every node goes to a
  rail-k leaf; a block of d * port_split nodes shares one leaf per rail. Otherwise NICs
  fill leaves in order (endpoint node * nics_per_node + k).
- Pod: the leaves under one set of spines. A pod has u spines ("planes"); every leaf of
  the pod has one cable to each. With `pod_gpus` the pod holds that many GPUs; without,
  the whole cluster is one pod if its leaves fit a spine's radix, else pods of radix / 2
  leaves (a whole number of rails).
- Core (only with several pods): plane j of every pod connects to the C core switches of
  plane j; each spine's up capacity is its down capacity / `core_oversubscription` (the
  taper above pods, e.g. 7:1), spread evenly over the C core switches (parallel cables
  become one link of summed bandwidth). C is the fewest switches of `radix` ports that hold
  all of a plane's up cables. Spine and core port counts are not otherwise enforced: a
  spine stands for as many physical switches as its ports need (bandwidth is what the
  model uses).

Routing (`FatTreePaths`): up to the lowest common tier and down (minimal hops). Same leaf:
no switch hop. Otherwise a plane j (and a core switch, hashed) is chosen by a hash of the
unordered endpoint pair: `minimal` takes one plane; `ecmp` (and `adaptive`, like InfiniBand
adaptive routing) spreads evenly over `ecmp_paths` distinct planes (all u if fewer).
Flows use the source GPU's NIC and the destination GPU's NIC, so cross-rail traffic goes
through a spine (no PXN-style rail hopping inside the node).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from topologies.batch_routing import PaddedPaths, mix64_array, u64
from topologies.errors import TopologyError
from topologies.fabric import Fabric, FabricRoute, spec_number, spec_routing
from topologies.paths import mix64
from topologies.types import LinkKind, Path, link_kind_code

FAT_TREE_ROUTING = ("ecmp", "minimal", "adaptive")


@dataclass(frozen=True)
class FatTreeSpec:
    """Fat-tree parameters (the `fabric:` mapping of machines.yaml, in SI units)."""

    radix: int
    link_bandwidth_Bps: float
    rail_optimized: bool = False
    oversubscription: float = 1.0
    port_split: int = 1
    pod_gpus: int | None = None
    core_oversubscription: float = 1.0
    routing: str = "ecmp"
    ecmp_paths: int = 8
    switch_latency_s: float = 0.3e-6

    @classmethod
    def from_fabric(
        cls,
        fabric: Mapping[str, object],
        where: str,
        *,
        routing: str | None = None,
        link_bandwidth_GBps: float | None = None,
    ) -> FatTreeSpec:
        """Parse and check a fabric mapping; errors name `where.<field>`."""
        bw = (
            link_bandwidth_GBps
            if link_bandwidth_GBps is not None
            else fabric.get("link_bandwidth_GBps")
        )
        pod = fabric.get("pod_gpus")
        spec = cls(
            radix=int(spec_number(fabric, "radix", where, integer=True)),
            link_bandwidth_Bps=spec_number(
                {"link_bandwidth_GBps": bw}, "link_bandwidth_GBps", where
            )
            * 1e9,
            rail_optimized=bool(fabric.get("rail_optimized", False)),
            oversubscription=spec_number(fabric, "oversubscription", where, default=1.0),
            port_split=int(spec_number(fabric, "port_split", where, integer=True, default=1)),
            pod_gpus=None
            if pod is None
            else int(spec_number(fabric, "pod_gpus", where, integer=True)),
            core_oversubscription=spec_number(fabric, "core_oversubscription", where, default=1.0),
            routing=spec_routing(fabric, routing, where, FAT_TREE_ROUTING),
            ecmp_paths=int(spec_number(fabric, "ecmp_paths", where, integer=True, default=8)),
            switch_latency_s=spec_number(fabric, "switch_latency_us", where, default=0.3) * 1e-6,
        )
        down, up = spec.leaf_ports()
        if down < 1 or up < 1:
            raise TopologyError(
                f"{where}.oversubscription={spec.oversubscription:g} leaves no up or down port "
                f"on a radix-{spec.radix} leaf"
            )
        return spec

    def leaf_ports(self) -> tuple[int, int]:
        """(down, up) ports of a leaf switch."""
        down = round(self.radix * self.oversubscription / (1.0 + self.oversubscription))
        return down, self.radix - down


@dataclass(frozen=True)
class _Layout:
    """Sizes of the tree for one cluster."""

    leaves: int
    leaves_per_pod: int
    pods: int
    up: int  # spines per pod (planes) = leaf up ports
    cores_per_plane: int
    spine_up_cables: float  # up cables per spine (down cables / core_oversubscription)


def _layout(spec: FatTreeSpec, nodes: int, nics: int, gpus_per_node: int) -> _Layout:
    down, up = spec.leaf_ports()
    per_leaf = down * spec.port_split
    rails = nics if spec.rail_optimized else 1
    if spec.rail_optimized:
        leaves = -(-nodes // per_leaf) * rails
    else:
        leaves = -(-(nodes * nics) // per_leaf)
    if spec.pod_gpus is not None:
        pod_nodes = max(1, spec.pod_gpus // gpus_per_node)
        per_pod = (
            -(-pod_nodes // per_leaf) * rails
            if spec.rail_optimized
            else -(-(pod_nodes * nics) // per_leaf)
        )
    elif leaves <= spec.radix:
        per_pod = leaves
    else:
        per_pod = max(rails, (spec.radix // 2) // rails * rails)
    pods = -(-leaves // per_pod)
    if pods == 1:
        per_pod = leaves
    cables = per_pod / spec.core_oversubscription
    cores = max(1, math.ceil(math.ceil(pods * cables - 1e-9) / spec.radix)) if pods > 1 else 0
    return _Layout(leaves, per_pod, pods, up, cores, cables)


class FatTreePaths:
    """Up/down routes of a fat tree built by `build_fat_tree` (arithmetic, no tables)."""

    def __init__(
        self, spec: FatTreeSpec, lay: _Layout, endpoint_leaf: np.ndarray, link_base: int
    ) -> None:
        self.leaf = endpoint_leaf.tolist()
        self._leaf = np.asarray(endpoint_leaf, dtype=np.int64)
        self.u = lay.up
        self.lp = lay.leaves_per_pod
        self.c = max(lay.cores_per_plane, 1)
        self.m = 1 if spec.routing == "minimal" else max(1, min(spec.ecmp_paths, lay.up))
        self.stride = self.u // self.m
        self.ls_base = link_base
        self.sc_base = link_base + 2 * lay.leaves * lay.up

    def paths(self, src_endpoint: int, dst_endpoint: int) -> FabricRoute:
        """Leaf-to-leaf paths between two endpoints under the configured policy."""
        la, lb = self.leaf[src_endpoint], self.leaf[dst_endpoint]
        if la == lb:
            return ((),), (1.0,)
        key = mix64(min(src_endpoint, dst_endpoint), max(src_endpoint, dst_endpoint))
        pa, pb = la // self.lp, lb // self.lp
        first = key % self.u
        out: list[Path] = []
        for i in range(self.m):
            j = (first + i * self.stride) % self.u
            up = self.ls_base + 2 * (la * self.u + j)
            down = self.ls_base + 2 * (lb * self.u + j) + 1
            if pa == pb:
                out.append((up, down))
                continue
            core = mix64(key, j) % self.c
            to_core = self.sc_base + 2 * ((pa * self.u + j) * self.c + core)
            from_core = self.sc_base + 2 * ((pb * self.u + j) * self.c + core) + 1
            out.append((up, to_core, from_core, down))
        return tuple(out), (1.0 / self.m,) * self.m

    @property
    def batch_shape(self) -> tuple[int, int]:
        """(most paths per pair, most links per path) that `paths_batch` can return."""
        return self.m, 4

    def paths_batch(self, src_endpoint: np.ndarray, dst_endpoint: np.ndarray) -> PaddedPaths:
        """`paths` for arrays of endpoint pairs, as padded (n, m, 4) matrices."""
        la, lb = self._leaf[src_endpoint], self._leaf[dst_endpoint]
        n, u, c = int(la.shape[0]), self.u, self.c
        key = mix64_array(
            np.minimum(src_endpoint, dst_endpoint), np.maximum(src_endpoint, dst_endpoint)
        )
        pa, pb = la // self.lp, lb // self.lp
        cross = pa != pb
        first = (key % u64(u)).astype(np.int64)
        links = np.full((n, self.m, 4), -1, dtype=np.int64)
        for i in range(self.m):
            j = (first + i * self.stride) % u
            links[:, i, 0] = self.ls_base + 2 * (la * u + j)
            links[:, i, 3] = self.ls_base + 2 * (lb * u + j) + 1
            core = (mix64_array(key, j) % u64(c)).astype(np.int64)
            to_core = self.sc_base + 2 * ((pa * u + j) * c + core)
            from_core = self.sc_base + 2 * ((pb * u + j) * c + core) + 1
            links[:, i, 1] = np.where(cross, to_core, -1)
            links[:, i, 2] = np.where(cross, from_core, -1)
        weight = np.full((n, self.m), 1.0 / self.m)
        valid = np.ones((n, self.m), dtype=bool)
        same = la == lb  # one empty path
        links[same] = -1
        valid[same, 1:] = False
        weight[same, 0] = 1.0
        return PaddedPaths(links, weight, valid)


def _endpoint_leaf(spec: FatTreeSpec, nodes: int, nics: int) -> np.ndarray:
    per_leaf = spec.leaf_ports()[0] * spec.port_split
    e = np.arange(nodes * nics, dtype=np.int64)
    if spec.rail_optimized:
        return (e // nics // per_leaf) * nics + e % nics
    return e // per_leaf


def build_fat_tree(
    spec: FatTreeSpec, *, nodes: int, nics_per_node: int, gpus_per_node: int, link_base: int = 0
) -> Fabric:
    """A fat-tree fabric for `nodes` nodes with `nics_per_node` NIC endpoints each.

    Parameters
    ----------
    spec : the fat-tree parameters (radix, oversubscription, rails, pods, routing).
    nodes, nics_per_node : the endpoints, numbered node * nics_per_node + k.
    gpus_per_node : converts `pod_gpus` into nodes.
    link_base : absolute id the fabric's first link will get (routes use absolute ids).

    Returns
    -------
    A `Fabric` with switches numbered leaves, then spines (pod p, plane j), then core
    switches (plane j, c); links leaf<->spine (kind `local`) then spine<->core (kind
    `global`), the two directions of a cable adjacent (up first). `cut_Bps` is the up
    capacity (per direction) of the half of the nodes at the narrowest tier they must
    cross: the leaf uplinks when the nodes span several leaf blocks, the spine uplinks
    when they span several pods (counted per node, so partial blocks count pro rata).
    """
    lay = _layout(spec, nodes, nics_per_node, gpus_per_node)
    leaf = _endpoint_leaf(spec, nodes, nics_per_node)
    n_leaf, u, lp, c = lay.leaves, lay.up, lay.leaves_per_pod, lay.cores_per_plane
    spines = lay.pods * u if n_leaf > 1 else 0
    bw = spec.link_bandwidth_Bps
    li = np.repeat(np.arange(n_leaf, dtype=np.int64), u)
    sj = n_leaf + (li // lp) * u + np.tile(np.arange(u, dtype=np.int64), n_leaf)
    if n_leaf == 1:
        li = sj = np.zeros(0, dtype=np.int64)
    spine = (
        np.repeat(np.arange(lay.pods * u, dtype=np.int64), c)
        if lay.pods > 1
        else np.zeros(0, np.int64)
    )
    core = n_leaf + spines + (spine % u) * c + np.tile(np.arange(c, dtype=np.int64), lay.pods * u)
    spine_id = n_leaf + spine
    core_bw = lay.spine_up_cables * bw / max(c, 1)
    n_ls, n_sc = 2 * li.shape[0], 2 * spine.shape[0]
    group = np.concatenate(
        [np.arange(n_leaf) // lp, np.arange(spines) // u, np.full(u * c if lay.pods > 1 else 0, -1)]
    ).astype(np.int32)
    local = np.concatenate(
        [
            np.arange(n_leaf) % lp,
            lp + np.arange(spines) % u,
            np.arange(u * c if lay.pods > 1 else 0),
        ]
    ).astype(np.int32)
    cut = _cut(spec, lay, nodes, nics_per_node)
    return Fabric(
        kind="fat-tree",
        switch_group=group,
        switch_local_index=local,
        endpoint_switch=leaf,
        node_group=(leaf[::nics_per_node] // lp).astype(np.int32),
        link_src=np.concatenate([_pairs(li, sj), _pairs(spine_id, core)]),
        link_dst=np.concatenate([_pairs(sj, li), _pairs(core, spine_id)]),
        link_kind=np.concatenate(
            [
                np.full(n_ls, link_kind_code(LinkKind.LOCAL), np.int8),
                np.full(n_sc, link_kind_code(LinkKind.GLOBAL), np.int8),
            ]
        ),
        link_bandwidth_Bps=np.concatenate([np.full(n_ls, bw), np.full(n_sc, core_bw)]),
        link_latency_s=np.full(n_ls + n_sc, spec.switch_latency_s),
        router=FatTreePaths(spec, lay, leaf, link_base),
        cut_Bps=cut,
        minimal_cut_Bps=cut,
        parameters=_parameters(spec, lay),
    )


def _pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[a0, b0, a1, b1, ...]: up and down direction of each cable adjacent."""
    return np.stack([a, b], axis=1).ravel()


def _cut(spec: FatTreeSpec, lay: _Layout, nodes: int, nics: int) -> float:
    """Up capacity of the first half of the nodes at the narrowest tier they must cross."""
    if nodes < 2:
        return float("inf")
    half = nodes // 2
    down, up = spec.leaf_ports()
    per_leaf = down * spec.port_split
    leaf_groups = lay.leaves // nics if spec.rail_optimized else lay.leaves
    cut = float("inf")
    if leaf_groups > 1:
        cut = half * nics * up * spec.link_bandwidth_Bps / per_leaf
    if lay.pods > 1:
        rails = nics if spec.rail_optimized else 1
        pod_nodes = lay.leaves_per_pod / rails * per_leaf / (1 if spec.rail_optimized else nics)
        cut = min(cut, half * up * lay.spine_up_cables * spec.link_bandwidth_Bps / pod_nodes)
    return cut


def _parameters(spec: FatTreeSpec, lay: _Layout) -> dict[str, object]:
    down, up = spec.leaf_ports()
    return {
        "kind": "fat-tree",
        "radix": spec.radix,
        "link_bandwidth_GBps": spec.link_bandwidth_Bps / 1e9,
        "rail_optimized": spec.rail_optimized,
        "oversubscription": spec.oversubscription,
        "leaf_down_ports": down,
        "leaf_up_ports": up,
        "port_split": spec.port_split,
        "pod_gpus": spec.pod_gpus,
        "core_oversubscription": spec.core_oversubscription,
        "leaves": lay.leaves,
        "pods": lay.pods,
        "spines_per_pod": up if lay.leaves > 1 else 0,
        "core_switches": lay.cores_per_plane * up if lay.pods > 1 else 0,
        "routing": spec.routing,
        "ecmp_paths": spec.ecmp_paths,
        "switch_latency_us": spec.switch_latency_s * 1e6,
    }
