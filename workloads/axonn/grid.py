"""AxoNN's 4D grid: rank order and process groups.

Rank order, fastest first: X (G_intra_c, column), Y (G_intra_r, row), Z (G_intra_d,
depth), data (G_data). With t = rank mod (Gx·Gy·Gz): x = t mod Gx,
y = (t div Gx) mod Gy, z = t div (Gx·Gy). Consecutive ranks share a node, so the
innermost groups stay inside a node.

Naming (documented once, used everywhere in axsim): X is AxoNN's `G_intra_c`, the inner
group. In a normal (non-transposed) linear layer X splits the input features k and
reduces the forward partial outputs; Y splits the output features n and reduces the
backward input gradients; Z shards the weights (all-gather / reduce-scatter) and, with
data, splits the batch. Transposed layers swap X and Y.
"""

from __future__ import annotations

import numpy as np

from workloads.axonn.params import Grid
from workloads.groups import ProcessGroups

GROUP_KINDS = ("x", "y", "z", "data", "xy", "world")


def coordinates(
    rank: np.ndarray | int, grid: Grid
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, y, z, data) coordinates of ranks."""
    r = np.asarray(rank, dtype=np.int64)
    t = r % grid.tensor
    return t % grid.x, (t // grid.x) % grid.y, t // (grid.x * grid.y), r // grid.tensor


def axonn_groups(grid: Grid) -> ProcessGroups:
    """Process groups x, y, z, data, xy and world of a 4D grid (members in rank order).

    xy is the X·Y plane of one Z slice (axonn's `outer_inner_intra_layer_parallel_group`),
    over which Megatron-AxoNN splits the vocabulary of its embedding and output layer."""
    ranks = np.arange(grid.size, dtype=np.int64).reshape(grid.data, grid.z, grid.y, grid.x)
    x = ranks.reshape(-1, grid.x)
    y = ranks.transpose(0, 1, 3, 2).reshape(-1, grid.y)
    z = ranks.transpose(0, 2, 3, 1).reshape(-1, grid.z)
    data = ranks.transpose(1, 2, 3, 0).reshape(-1, grid.data)
    xy = ranks.reshape(-1, grid.x * grid.y)
    world = np.arange(grid.size, dtype=np.int64)[None, :]
    return ProcessGroups(
        grid.size, {"x": x, "y": y, "z": z, "data": data, "xy": xy, "world": world}
    )
