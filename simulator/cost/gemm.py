"""The GEMM efficiency curve: tile and wave quantisation and a k ramp, vectorised.

Why this shape: a GEMM kernel splits the m x n output into tiles, one thread block per
tile, and runs them in waves of one tile per SM (CU). Three losses follow, each a factor
in [0, 1]:

- tile and wave quantisation: the kernel pays for ceil(tiles / SMs) full waves of full
  tiles, so utilisation = m·n·batch / (waves · SMs · tile_m · tile_n);
- tile efficiency: a small tile re-reads its inputs more often per FLOP. With the tile's
  arithmetic intensity I = tile_m·tile_n / (tile_m + tile_n), efficiency = I / (I + knee),
  normalised so the best tile of the candidate set has 1;
- the k ramp: every tile pays a prologue (pipeline fill) and an epilogue (writing the
  tile) worth about `k_ramp` elements of its k loop, so efficiency = k / (k + k_ramp);
- split-K: a GEMM with too few output tiles to fill the SMs splits its k loop into s
  parts run by s x the tiles (cuBLAS, CUTLASS and hipBLASLt do: the traces show their
  `splitKreduce_kernel`); each part pays the ramp and the partial sums a reduction worth
  another ramp, so efficiency = util(s x tiles) x (k / s) / (k / s + 2 k_ramp) for s > 1.

The kernel library picks the tile and split; the model takes the candidate with the
highest product, as cuBLAS/hipBLASLt heuristics roughly do. The efficiency is a sawtooth
in m, n and k, but the implied time 2·m·n·k·batch / (peak · efficiency) =
2·waves·SMs·tile_m·tile_n·(k / s + ramp_s) / (peak · tile efficiency) never decreases when
m, n, k or batch grows, because for every (tile, split) candidate the wave count and
k / s + ramp_s only grow.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray


def tile_efficiencies(tiles: Sequence[tuple[int, int]], knee: float) -> NDArray[np.float64]:
    """Relative efficiency of each candidate tile: I / (I + knee), best tile = 1."""
    t = np.asarray(tiles, dtype=np.float64).reshape(-1, 2)
    intensity = t[:, 0] * t[:, 1] / (t[:, 0] + t[:, 1])
    eff = intensity / (intensity + knee)
    return np.asarray(eff / eff.max(), dtype=np.float64)


def gemm_efficiency(
    m: ArrayLike,
    n: ArrayLike,
    k: ArrayLike,
    batch: ArrayLike,
    *,
    sm_count: int,
    tiles: Sequence[tuple[int, int]],
    tile_intensity_knee: float,
    k_ramp: float,
    splits: Sequence[int] = (1,),
) -> NDArray[np.float64]:
    """Fraction of the effective GEMM peak that GEMMs of these shapes achieve.

    Inputs broadcast against each other; the result has their broadcast shape. Empty
    problems (a zero dimension) get efficiency 1 (they do no work, so it is irrelevant).
    Compute time = 2·m·n·k·batch / (peak · efficiency).
    """
    mm, nn, kk, bb = (np.asarray(x, dtype=np.float64)[..., None] for x in (m, n, k, batch))
    t = np.asarray(tiles, dtype=np.float64).reshape(-1, 2)
    sp = np.asarray(splits, dtype=np.float64)
    # candidates: every (tile, split) pair, flattened on the last axis
    tm, tn = np.repeat(t[:, 0], sp.size), np.repeat(t[:, 1], sp.size)
    ss = np.tile(sp, t.shape[0])
    tile_eff = np.repeat(tile_efficiencies(tiles, tile_intensity_knee), sp.size)
    n_tiles = np.ceil(mm / tm) * np.ceil(nn / tn) * bb * ss
    waves = np.ceil(n_tiles / sm_count)
    ramp_k = np.where(ss > 1, 2.0 * k_ramp, k_ramp)
    with np.errstate(divide="ignore", invalid="ignore"):
        util = np.where(waves > 0, mm * nn * bb * ss / (waves * sm_count * tm * tn), 1.0)
        ramp = np.where(kk > 0, (kk / ss) / (kk / ss + ramp_k), 1.0)
    eff = util * tile_eff * ramp
    return np.asarray(eff.max(axis=-1), dtype=np.float64)


def best_tile(
    m: int,
    n: int,
    k: int,
    batch: int,
    *,
    sm_count: int,
    tiles: Sequence[tuple[int, int]],
    tile_intensity_knee: float,
    k_ramp: float,
) -> tuple[int, int]:
    """The candidate tile the model picks for one shape (for reports and debugging)."""
    per_tile = [
        float(
            gemm_efficiency(
                m,
                n,
                k,
                batch,
                sm_count=sm_count,
                tiles=[tile],
                tile_intensity_knee=tile_intensity_knee,
                k_ramp=k_ramp,
            )
        )
        * float(tile_efficiencies(tiles, tile_intensity_knee)[i])
        for i, tile in enumerate(tiles)
    ]
    return tiles[int(np.argmax(per_tile))]
