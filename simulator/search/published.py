"""The SC'24 paper's own search procedure, as a first-class prediction.

Each published AxoNN point is the fastest *measured* grid of the analytical model's top
10 (paper §V-B), so a like-for-like prediction ranks grids exactly as the authors'
executable model did and simulates those grids: `published_ranking` re-implements
Megatron-AxoNN's examples/comm_model.py (branch gordon-bell-perlmutter, commit 8a4ae24 of
2024-03-23, `model_v2` and `get_configs_for_transformer`; the formulas are restated here,
not copied) with its Perlmutter and Frontier bandwidth tables (`PaperBandwidths`, the same
numbers), and `paper_procedure` simulates its top K. axsim's own search
(simulator/search/grids.py) stays beside it as what a user of axsim would find.

What the executable model does, and this module therefore does too (its quirks included):
- grids: every power-of-two Gc x Gr x Gd x Gdata (X, Y, Z, data in axsim's names) with
  Gc·Gr·Gd >= a minimum tensor-parallel degree chosen per model for memory (the
  launcher's table, `MIN_TENSOR`) and the batch divisible by Gdata·Gd; no memory model;
- per block, four linears (h->3h, h->h transposed, h->4h, 4h->h transposed), each:
  data all-reduce 4·(Gdata-1)/Gdata·K·h²/(Gc·Gr·Gd) bytes (fp32 gradients), three Z
  collectives 3·(Gd-1)/Gd·K·h²/(Gc·Gr)·2 bytes, and the X/Y all-reduces on
  B/(Gdata·Gd)·S tokens: untransposed 2(Gr-1)/Gr·h/Gc (Y) and 2·2(Gc-1)/Gc·K·h/Gr (X,
  forward twice for the recompute); transposed 2·2(Gr-1)/Gr·K·h/Gc (Y) and
  2(Gc-1)/Gc·h/Gr (X): the transposed layers count their wide side in the doubled
  forward term, as the code does;
- each group's bytes (in GiB) over its bandwidth (GB/s) of (inner product, own size);
  a group the table has no value for drops the grid; sort by total, stable in the
  enumeration order (Gc, Gr, Gd, Gdata ascending).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from simulator.errors import ConfigError
from simulator.search.analytical import PaperBandwidths
from workloads.axonn.params import Grid

GIB = 1024**3
BLOCK_LINEARS = ((3, False), (1, True), (4, False), (4, True))  # (K, transposed)
MIN_TENSOR: dict[str, int] = {
    # Megatron-AxoNN examples/launch_per_comm_model.py (same commit): min_tp per model
    "gpt-5b": 4,
    "gpt-10b": 8,
    "gpt-20b": 16,
    "gpt-40b": 32,
    "gpt-60b": 64,
    "gpt-80b": 64,
    "gpt-160b": 128,
    # not in the launcher: the rule its 5B-160B entries follow (one tensor-parallel GPU
    # per 1.25 B parameters, a power of two), an assumption
    "gpt-320b": 256,
    "gpt-640b": 512,
}


@dataclass(frozen=True)
class RankedGrid:
    """One grid of the published model's order with its modelled communication time."""

    grid: Grid
    comm_time_s: float
    rank: int


def _table(machine: str) -> Callable[[int, int], float | None]:
    """The executable model's get_bw: GB/s of a group, None where it has no value."""
    bw = PaperBandwidths(machine)

    def beta(inner: int, own: int) -> float | None:
        # the code's branches exist for power-of-two products only (ip 1, 2, 4, >= 8)
        if inner not in (1, 2, 4) and inner < 8:
            return None
        return bw(inner, own) / 1e9

    return beta


def layer_comm_gib_s(
    batch: int,
    seq: int,
    k: int,
    h: int,
    grid: Grid,
    beta: Callable[[int, int], float | None],
    transposed: bool,
) -> float | None:
    """One linear's modelled seconds (the code's GiB over GB/s), None if a group has no
    bandwidth in the table."""
    gc, gr, gd, gdata = grid.x, grid.y, grid.z, grid.data
    dp = 4 * (gdata - 1) / gdata * k * h * h / (gc * gr * gd) * 2 / GIB
    depth = 3 * (gd - 1) / gd * k * h * h / (gc * gr) * 2 / GIB
    tokens = batch / gdata / gd * seq
    if not transposed:
        row = 2 * (gr - 1) / gr * (tokens * h / gc) * 2 / GIB
        col = 2 * 2 * (gc - 1) / gc * (tokens * k * h / gr) * 2 / GIB
    else:
        row = 2 * 2 * (gr - 1) / gr * (tokens * k * h / gc) * 2 / GIB
        col = 2 * (gc - 1) / gc * (tokens * h / gr) * 2 / GIB
    total = 0.0
    inner = 1
    for size, volume in ((gc, col), (gr, row), (gd, depth), (gdata, dp)):
        if size > 1:
            b = beta(inner, size)
            if b is None:
                return None
            total += volume / b
        inner *= size
    return total


def published_ranking(
    machine: str,
    gpus: int,
    layers: int,
    hidden: int,
    batch_sequences: int,
    seq_len: int,
    min_tensor: int,
) -> list[RankedGrid]:
    """Every grid the executable model admits, best first (its order for ties)."""
    beta = _table(machine)
    powers = [2**i for i in range(gpus.bit_length()) if 2**i <= gpus]
    scored: list[tuple[float, Grid]] = []
    for gc in powers:
        for gr in powers:
            for gd in powers:
                for gdata in powers:
                    if gc * gr * gd * gdata != gpus or gc * gr * gd < min_tensor:
                        continue
                    if batch_sequences % (gdata * gd):
                        continue
                    grid = Grid(x=gc, y=gr, z=gd, data=gdata)
                    parts = [
                        layer_comm_gib_s(batch_sequences, seq_len, k, hidden, grid, beta, t)
                        for k, t in BLOCK_LINEARS
                    ]
                    if any(p is None for p in parts):
                        continue
                    scored.append((sum(p for p in parts if p is not None), grid))
    scored.sort(key=lambda s: s[0])
    return [RankedGrid(g, t * layers, i + 1) for i, (t, g) in enumerate(scored)]


def min_tensor_for(model: str) -> int:
    """The minimum tensor-parallel degree the authors' launcher used for a model preset."""
    got = MIN_TENSOR.get(model)
    if got is None:
        raise ConfigError(
            f"--procedure paper: the authors' launcher gives no minimum tensor-parallel "
            f"degree for '{model}' (it has {', '.join(MIN_TENSOR)})"
        )
    return got
