"""Which slice of each full parameter a rank holds, and the inverse (assembly).

One function, `shard_of`, encodes the 4D layout of every parameter; `assemble` reuses it
on an index tensor, so the two can never disagree. The layout is axonn's
(extract_local_params_from_full_params): a normal layer's weight (out × in) is split
in-features over X and out-features over Y (transposed: swapped), the block is flattened
and split over Z; biases follow the out-features split; LayerNorm parameters follow the
residual stream (hidden split over X).
"""

from __future__ import annotations

import torch

from validation.torch4d.config import Grid

TRANSPOSED = frozenset({"attn_out", "mlp_down"})
LINEARS = frozenset({"qkv", "attn_out", "mlp_up", "mlp_down"})


def shard_of(
    name: str, full: torch.Tensor, grid: Grid, coords: tuple[int, int, int, int]
) -> torch.Tensor:
    """The part of the full parameter `name` (e.g. 'blocks.0.qkv.weight') held at `coords`."""
    x, y, z, _ = coords
    layer, kind = name.split(".")[-2:]
    if layer not in LINEARS:  # LayerNorm: hidden split over X
        return full.chunk(grid.x)[x].clone()
    if layer in TRANSPOSED:
        in_idx, in_n, out_idx, out_n = y, grid.y, x, grid.x
    else:
        in_idx, in_n, out_idx, out_n = x, grid.x, y, grid.y
    if kind == "bias":
        return full.chunk(out_n)[out_idx].clone()
    block = full.chunk(out_n, dim=0)[out_idx].chunk(in_n, dim=1)[in_idx]
    return block.reshape(-1).chunk(grid.z)[z].clone()


def local_state(
    full_state: dict[str, torch.Tensor], grid: Grid, rank: int
) -> dict[str, torch.Tensor]:
    """Every parameter's shard for one rank (to load into a 4D model)."""
    coords = grid.coords(rank)
    return {name: shard_of(name, t, grid, coords) for name, t in full_state.items()}


def assemble(
    name: str, shape: torch.Size, shards: dict[int, torch.Tensor], grid: Grid
) -> tuple[torch.Tensor, float]:
    """The full tensor from every rank's shard, and the largest disagreement between
    replicas of the same slice (0.0 when replicas agree bit for bit).

    Raises ValueError if some element is held by no rank.
    """
    index = torch.arange(torch.Size(shape).numel()).reshape(shape)
    first = next(iter(shards.values()))
    out = torch.full((index.numel(),), float("nan"), dtype=first.dtype)
    seen = torch.zeros(index.numel(), dtype=torch.bool)
    replica_err = 0.0
    for rank, shard in sorted(shards.items()):
        ix = shard_of(name, index, grid, grid.coords(rank)).reshape(-1)
        values = shard.reshape(-1).to(out.dtype)
        again = seen[ix]
        if bool(again.any()):
            replica_err = max(replica_err, float((out[ix][again] - values[again]).abs().max()))
        out[ix] = values
        seen[ix] = True
    if not bool(seen.all()):
        raise ValueError(f"{name}: {int((~seen).sum())} elements are held by no rank")
    return out.reshape(shape), replica_err
