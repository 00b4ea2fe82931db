"""AxoNN's analytical communication model (paper §V-B, Eqs. 1–7) and its group bandwidths.

For one linear layer with k input and n output features, m tokens per data replica and a
grid Gx x Gy x Gz x Gdata (axsim's X/Y naming, see workloads/axonn/grid.py; the paper's
equations read with x and y exchanged), the times are:

    t_AG,z   = (Gz-1) · k·n/(Gx·Gy·Gz) / β_z                       (1)
    t_RS,z   = ((Gz-1)/Gz) · k·n/(Gx·Gy) / β_z                     (2)
    t_AR,fwd = 2((Gx-1)/Gx) · m·n/(Gz·Gy) / β_x      (paper: AR,y) (3)
    t_AR,bwd = 2((Gy-1)/Gy) · m·k/(Gz·Gx) / β_y      (paper: AR,x) (4)
    t_AR,data= 2((Gdata-1)/Gdata) · k·n/(Gx·Gy·Gz) / β_data         (5)

volumes in bytes (elements x dtype size). Per layer (6), as in the executable version
(Megatron-AxoNN examples/comm_model.py on branch gordon-bell-perlmutter): three Z
collectives (all-gather forward and backward, reduce-scatter) and the forward all-reduce
twice (recompute); transposed layers exchange Gx and Gy; the total sums over layers.
`layer_comm_s` is that model, kept as the paper wrote it.

`axonn_comm_estimate` is axsim's version of it, counted from the same description the
simulated program is built from (workloads/axonn/schedule.py), so the ranking and the
simulation cannot disagree about what is sent: every collective of the iteration (each
implementation's Z collectives per weight lifetime, the head's, the gradient sync in
its precision) costs its nccl-tests bus factor x buffer bytes / β of its group. For the
SC'24 code's "keep" lifetime and one microbatch its block terms are exactly (1)-(6).

Group bandwidths β (order X, Y, Z, data; "inner product" = product of the sizes of the
groups inside group i): inside a node, a bus bandwidth measured for concurrent
collectives with 1 GB messages keyed by (inner product, own size); across nodes
(7) β_i = β_inter / min(Gnode, inner product). `TopologyBandwidths` measures them with
axsim's own collective model on the machine; `PaperBandwidths` is the paper's table.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, cast

from simulator.errors import ConfigError
from topologies.types import Topology
from workloads.axonn.params import Grid
from workloads.axonn.schedule import AxonnCalls
from workloads.ops import bus_factor

GROUP_ORDER = ("x", "y", "z", "data")
PROBE_BYTES = 2**30  # 1 GiB messages, as the paper's bandwidth table


def inner_products(grid: Grid) -> dict[str, int]:
    """Product of the sizes of the groups inside each group kind (rank order X, Y, Z,
    data; the X·Y plane and the world start at the innermost rank)."""
    return {
        "x": 1,
        "y": grid.x,
        "z": grid.x * grid.y,
        "data": grid.x * grid.y * grid.z,
        "xy": 1,
        "world": 1,
    }


def own_sizes(grid: Grid) -> dict[str, int]:
    return {
        "x": grid.x,
        "y": grid.y,
        "z": grid.z,
        "data": grid.data,
        "xy": grid.x * grid.y,
        "world": grid.size,
    }


BandwidthFn = Callable[[int, int], float]
"""beta(inner product, own size) in bytes/s."""


@dataclass
class PaperBandwidths:
    """The paper's measured table (GB/s) for Perlmutter and Frontier (axonn-4d.md)."""

    machine: str

    # machine -> inner product -> own size -> GB/s; "big" is the fallback key at both
    # levels (a plain value at the top), "any" a row's value for every own size
    TABLES: ClassVar[dict[str, dict[int | str, int | dict[int | str, int]]]] = {
        "perlmutter": {
            1: {2: 76, 4: 225, "big": 80},
            2: {2: 76, "big": 40},
            4: {"any": 20},
            "big": 20,
        },
        "frontier": {
            1: {2: 129, 4: 52, 8: 135, "big": 40},
            2: {2: 50, 4: 72, "big": 20},
            4: {2: 36, "big": 10},
            "big": 5,
        },
    }

    def __post_init__(self) -> None:
        if self.machine not in self.TABLES:
            raise ConfigError(
                f"--bandwidths paper: the paper has no table for '{self.machine}' (perlmutter, frontier)"
            )

    def __call__(self, inner: int, own: int) -> float:
        table = self.TABLES[self.machine]
        row = table.get(inner)
        if row is None:
            return float(cast(int, table["big"])) * 1e9
        assert isinstance(row, dict)
        if "any" in row:
            return float(row["any"]) * 1e9
        return float(row.get(own, row["big"])) * 1e9


MAX_PROBE_NODES = 16  # largest machine built to measure a group placement not aligned to nodes


@dataclass
class TopologyBandwidths:
    """Group bandwidths from axsim's own collective model on a machine.

    Intra-node groups: bus bandwidth of a 1 GiB all-reduce with all instances of the
    (inner product, own size) placement running concurrently on one node. Inter-node:
    (7) with β_inter measured as the per-node bandwidth of concurrent rings spanning
    several nodes (one instance per GPU of a node).
    """

    machine: str
    gpus_per_node: int
    build: Callable[[int], Topology]
    network: str = "contention"
    _cache: dict[tuple[int, int], float] = field(default_factory=dict)
    _inter: float | None = None

    def _busbw(self, nodes: int, own: int, stride: int) -> float:
        """Bus bandwidth of all instances of the placement running concurrently on
        `nodes` nodes (callers pass node counts the placement tiles)."""
        from simulator.benchmarks.collectives import collective_sweep

        rows = collective_sweep(
            self.build(nodes), "all-reduce", own, stride, [PROBE_BYTES], "auto", self.network
        )
        return rows[0].busbw_GBps * 1e9

    def beta_inter(self) -> float:
        if self._inter is None:
            nodes = 8
            self._inter = self._busbw(nodes, nodes, self.gpus_per_node) * self.gpus_per_node
        return self._inter

    def __call__(self, inner: int, own: int) -> float:
        key = (inner, own)
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        g = self.gpus_per_node
        span = inner * own
        tiled_nodes = math.lcm(span, g) // g  # fewest whole nodes the placement tiles
        if span <= g and g % span == 0:  # inside a node
            beta = self._busbw(1, own, inner)
        elif span % g == 0 or tiled_nodes > MAX_PROBE_NODES:  # whole nodes: (7)
            beta = self.beta_inter() / min(g, inner)
        else:
            # groups not aligned with node boundaries (a factor 3 on 4-GPU nodes): some
            # instances straddle two nodes, so neither the node-local table nor (7)
            # applies; measure the placement itself where it tiles
            beta = self._busbw(tiled_nodes, own, inner)
        self._cache[key] = beta
        return beta


@dataclass(frozen=True)
class CommEstimate:
    """Modelled communication time of one iteration, by group."""

    by_group_s: dict[str, float]

    @property
    def total_s(self) -> float:
        return sum(self.by_group_s.values())


def layer_comm_s(
    k: int,
    n: int,
    m: float,
    grid: Grid,
    beta: dict[str, float],
    dtype_bytes: int,
    transposed: bool,
    microbatches: int = 1,
) -> dict[str, float]:
    """Eqs. (1)-(5) for one linear layer, combined as in (6)."""
    gx, gy = (grid.y, grid.x) if transposed else (grid.x, grid.y)
    gz, gd = grid.z, grid.data
    fwd_group, bwd_group = ("y", "x") if transposed else ("x", "y")
    b = dtype_bytes
    t_ag = (gz - 1) * k * n / (gx * gy * gz) * b / beta["z"]
    t_rs = (gz - 1) / gz * k * n / (gx * gy) * b / beta["z"]
    t_fwd = 2 * (gx - 1) / gx * m * n / (gz * gy) * b / beta[fwd_group]
    t_bwd = 2 * (gy - 1) / gy * m * k / (gz * gx) * b / beta[bwd_group]
    t_data = 2 * (gd - 1) / gd * k * n / (gx * gy * gz) * b / beta["data"]
    out = dict.fromkeys(GROUP_ORDER, 0.0)
    out["z"] = microbatches * (2 * t_ag + t_rs)
    out[fwd_group] += 2 * t_fwd  # forward + recompute
    out[bwd_group] += t_bwd
    out["data"] += t_data
    return out


def axonn_comm_bytes(calls: AxonnCalls, microbatches: int) -> dict[str, float]:
    """Buffer bytes per group kind and rank in one iteration: what the estimate prices and
    what the simulated program issues (tests/test_axonn_schedule.py checks both)."""
    out: dict[str, float] = {}
    for call, count in calls.iteration(microbatches):
        out[call.group] = out.get(call.group, 0.0) + count * call.nbytes
    return out


def axonn_comm_estimate(
    calls: AxonnCalls, microbatches: int, bandwidth: BandwidthFn
) -> CommEstimate:
    """Eq. (6) over every collective the simulated program issues: bus factor x buffer
    bytes / β(inner product, own size) per call, summed by group kind."""
    grid = calls.grid
    inner, own = inner_products(grid), own_sizes(grid)
    beta: dict[str, float] = {}
    total = dict.fromkeys(GROUP_ORDER, 0.0)
    for call, count in calls.iteration(microbatches):
        p = own[call.group]
        if p <= 1:
            continue  # a group of one moves nothing
        if call.group not in beta:
            beta[call.group] = bandwidth(inner[call.group], p)
        t = count * bus_factor(call.kind, p) * call.nbytes / beta[call.group]
        total[call.group] = total.get(call.group, 0.0) + t
    return CommEstimate(total)
