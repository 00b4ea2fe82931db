"""Slingshot-style dragonfly fabric: groups of all-to-all switches, global links between groups.

Structure (`build_dragonfly`): `groups` groups of `switches_per_group` switches; inside a
group every switch pair has one local cable; every pair of groups has
`global_links_per_group_pair` global cables. Global cable i between groups a < b leaves
a from switch ((b - 1) * h + i) mod S and enters b at switch (a * h + i) mod S, which
spreads each group's global ports round-robin over its switches (h = cables per pair,
S = switches per group). Cables landing on the same switch pair (h > S) merge into one
link of summed bandwidth. All `groups_total` groups are instantiated even when the job's
nodes fill fewer (so Valiant paths through idle groups exist); nodes fill consecutive
groups, `nodes_per_group` each. NIC attachment follows the HPE Cray EX chassis: a chassis
of nodes shares `nics_per_node` switch blades and NIC k of every node in it is cabled to
the chassis' k-th switch (a node's NICs land on different switches; the chassis size is
the endpoints per switch, 16 nodes on Frontier and Perlmutter). An assumption from the
chassis layout (8 blades x 2 nodes, 4 switch blades, 16 endpoint ports each), not a
published cabling map.

Routing policies (minimal, ecmp, valiant, adaptive) are implemented and documented in
`topologies.dragonfly.routing`: minimal routes take at most 3 switch-to-switch hops
(local, global, local); Valiant routes go through an intermediate group (or, inside a
group, an intermediate switch); adaptive mixes both with fixed weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from topologies.dragonfly.routing import DragonflyPaths
from topologies.errors import TopologyError
from topologies.fabric import ROUTING_POLICIES, Fabric, spec_number, spec_routing
from topologies.rows import distinct_count
from topologies.types import LinkKind, link_kind_code


@dataclass(frozen=True)
class DragonflySpec:
    """Dragonfly parameters (the `fabric:` mapping of machines.yaml, in SI units)."""

    nodes_per_group: int
    switches_per_group: int
    groups_total: int
    global_links_per_group_pair: int
    link_bandwidth_Bps: float
    routing: str = "adaptive"
    adaptive_minimal_weight: float = 0.5
    valiant_paths: int = 4
    local_latency_s: float = 0.35e-6
    global_latency_s: float = 0.5e-6

    @classmethod
    def from_fabric(
        cls,
        fabric: Mapping[str, object],
        where: str,
        *,
        routing: str | None = None,
        link_bandwidth_GBps: float | None = None,
    ) -> DragonflySpec:
        """Parse and check a fabric mapping; errors name `where.<field>`."""
        bw = (
            link_bandwidth_GBps
            if link_bandwidth_GBps is not None
            else fabric.get("link_bandwidth_GBps")
        )
        weight = spec_number(fabric, "adaptive_minimal_weight", where, default=0.5, allow_zero=True)
        if weight > 1:
            raise TopologyError(f"{where}.adaptive_minimal_weight must be in [0, 1], got {weight}")
        return cls(
            nodes_per_group=int(spec_number(fabric, "nodes_per_group", where, integer=True)),
            switches_per_group=int(spec_number(fabric, "switches_per_group", where, integer=True)),
            groups_total=int(spec_number(fabric, "groups_total", where, integer=True)),
            global_links_per_group_pair=int(
                spec_number(fabric, "global_links_per_group_pair", where, integer=True)
            ),
            link_bandwidth_Bps=spec_number(
                {"link_bandwidth_GBps": bw}, "link_bandwidth_GBps", where
            )
            * 1e9,
            routing=spec_routing(fabric, routing, where, ROUTING_POLICIES),
            adaptive_minimal_weight=weight,
            valiant_paths=int(spec_number(fabric, "valiant_paths", where, integer=True, default=4)),
            local_latency_s=spec_number(fabric, "local_latency_us", where, default=0.35) * 1e-6,
            global_latency_s=spec_number(fabric, "global_latency_us", where, default=0.5) * 1e-6,
        )


def _interleave(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """[a0, b0, a1, b1, ...]: the two directions of each cable next to each other."""
    return np.stack([a, b], axis=1).ravel()


def build_dragonfly(
    spec: DragonflySpec,
    *,
    nodes: int,
    nics_per_node: int,
    link_base: int = 0,
    cabled_nics_per_node: int | None = None,
) -> Fabric:
    """A dragonfly fabric for `nodes` nodes with `nics_per_node` NIC endpoints each.

    Parameters
    ----------
    spec : the dragonfly parameters (groups, switches, global cables, routing).
    nodes, nics_per_node : the endpoints, numbered node * nics_per_node + k.
    cabled_nics_per_node : the NICs the machine's chassis are cabled for (the preset's
        count). Fewer NICs as a what-if leave ports empty: a node keeps its chassis and its
        NIC k its switch, instead of the nodes being re-packed onto other switches.
    link_base : absolute id the fabric's first link will get (routes use absolute ids).

    Returns
    -------
    A `Fabric` whose switches are numbered group * switches_per_group + s, with local
    links (kind `local`) first, group by group, then global links (kind `global`), the two
    directions of a cable adjacent. `cut_Bps` counts the global links between the halves
    of the nodes plus relays through idle groups (what Valiant paths can use);
    `minimal_cut_Bps` only the direct ones. Halves are measured in (fractional) groups, so
    the figure is exact when the halves are whole groups. A one-group job is cut across
    its endpoint switches' local links (plus relays through the group's idle switches).
    """
    s, npg, h = spec.switches_per_group, spec.nodes_per_group, spec.global_links_per_group_pair
    used = -(-nodes // npg)
    groups = max(spec.groups_total, used)
    iu, ju = np.triu_indices(s, 1)
    grp_off = np.arange(groups, dtype=np.int64)[:, None] * s
    local_src = (grp_off + _interleave(iu, ju)[None, :]).ravel()
    local_dst = (grp_off + _interleave(ju, iu)[None, :]).ravel()
    ga, gb = np.triu_indices(groups, 1)
    hc = min(h, s)
    lo = np.repeat(ga, hc).astype(np.int64)
    hi = np.repeat(gb, hc).astype(np.int64)
    ci = np.tile(np.arange(hc, dtype=np.int64), ga.shape[0])
    u_lo = lo * s + ((hi - 1) * h + ci) % s
    u_hi = hi * s + (lo * h + ci) % s
    mult = np.array([len(range(i, h, s)) for i in range(hc)], dtype=np.float64)
    glob_bw = np.tile(mult, ga.shape[0]) * spec.link_bandwidth_Bps
    n_local, n_global = local_src.shape[0], 2 * u_lo.shape[0]
    e = np.arange(nodes * nics_per_node, dtype=np.int64)
    node = e // nics_per_node
    cabled = max(nics_per_node, cabled_nics_per_node or nics_per_node)
    per_switch = max(1, (npg * cabled) // s)  # endpoints (= chassis nodes) per switch
    chassis = (node % npg) // per_switch
    endpoint_switch = (node // npg) * s + (chassis * cabled + e % nics_per_node) % s
    cut, minimal_cut = _cuts(spec, nodes, groups, used, distinct_count(endpoint_switch))
    return Fabric(
        kind="dragonfly",
        switch_group=np.repeat(np.arange(groups, dtype=np.int32), s),
        switch_local_index=np.tile(np.arange(s, dtype=np.int32), groups),
        endpoint_switch=endpoint_switch,
        node_group=(np.arange(nodes) // npg).astype(np.int32),
        link_src=np.concatenate([local_src, _interleave(u_lo, u_hi)]),
        link_dst=np.concatenate([local_dst, _interleave(u_hi, u_lo)]),
        link_kind=np.concatenate(
            [
                np.full(n_local, link_kind_code(LinkKind.LOCAL), np.int8),
                np.full(n_global, link_kind_code(LinkKind.GLOBAL), np.int8),
            ]
        ),
        link_bandwidth_Bps=np.concatenate(
            [np.full(n_local, spec.link_bandwidth_Bps), np.repeat(glob_bw, 2)]
        ),
        link_latency_s=np.concatenate(
            [np.full(n_local, spec.local_latency_s), np.full(n_global, spec.global_latency_s)]
        ),
        router=DragonflyPaths(
            switches_per_group=s,
            groups=groups,
            global_links_per_group_pair=h,
            routing=spec.routing,
            adaptive_minimal_weight=spec.adaptive_minimal_weight,
            valiant_paths=spec.valiant_paths,
            endpoint_switch=endpoint_switch,
            link_base=link_base,
        ),
        cut_Bps=cut,
        minimal_cut_Bps=minimal_cut,
        parameters=_parameters(spec, groups, used),
    )


def _cuts(
    spec: DragonflySpec, nodes: int, groups: int, used: int, switches_used: int
) -> tuple[float, float]:
    """(cut with relays through idle groups, minimal cut) between the halves of the nodes."""
    if nodes < 2:
        return float("inf"), float("inf")
    n_a, n_b = nodes // 2, nodes - nodes // 2
    if used == 1:
        if switches_used < 2:
            return float("inf"), float("inf")
        s_a, s_b = switches_used * n_a / nodes, switches_used * n_b / nodes
        local = s_a * s_b * spec.link_bandwidth_Bps
        relay = (spec.switches_per_group - switches_used) * min(s_a, s_b) * spec.link_bandwidth_Bps
        return local + relay, local
    g_a, g_b = n_a / spec.nodes_per_group, n_b / spec.nodes_per_group
    per_pair = spec.global_links_per_group_pair * spec.link_bandwidth_Bps
    minimal = g_a * g_b * per_pair
    relay = (groups - used) * min(g_a, g_b) * per_pair
    return minimal + relay, minimal


def _parameters(spec: DragonflySpec, groups: int, used: int) -> dict[str, object]:
    return {
        "kind": "dragonfly",
        "groups_total": groups,
        "groups_used": used,
        "nodes_per_group": spec.nodes_per_group,
        "switches_per_group": spec.switches_per_group,
        "global_links_per_group_pair": spec.global_links_per_group_pair,
        "link_bandwidth_GBps": spec.link_bandwidth_Bps / 1e9,
        "routing": spec.routing,
        "adaptive_minimal_weight": spec.adaptive_minimal_weight,
        "valiant_paths": spec.valiant_paths,
        "local_latency_us": spec.local_latency_s * 1e6,
        "global_latency_us": spec.global_latency_s * 1e6,
    }
