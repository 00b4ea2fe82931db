"""Process groups of the 4D grid (X, Y, Z, data) for the calling rank.

Every rank creates every group instance in the same order (torch.distributed requires
it) and keeps its own. Groups carry a `group_desc` ('axsim_X', ...) so that the
`distributedInfo.pg_config` of a trace names them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch.distributed as dist

from validation.torch4d.config import Grid

KINDS = ("X", "Y", "Z", "data")


@dataclass
class Mesh:
    """The calling rank's coordinates and its X, Y, Z and data process groups."""

    grid: Grid
    rank: int
    groups: dict[str, dist.ProcessGroup] = field(default_factory=dict)

    @property
    def coords(self) -> tuple[int, int, int, int]:
        return self.grid.coords(self.rank)

    @property
    def x(self) -> int:
        return self.coords[0]

    @property
    def y(self) -> int:
        return self.coords[1]

    @property
    def z(self) -> int:
        return self.coords[2]

    @property
    def d(self) -> int:
        return self.coords[3]

    def group(self, kind: str) -> dist.ProcessGroup:
        return self.groups[kind]

    def size(self, kind: str) -> int:
        return self.grid.size(kind)

    @property
    def batch_shard(self) -> int:
        """Which of the Gz·Gdata batch shards this rank holds (AxoNN: data-major, Z minor)."""
        return self.d * self.grid.z + self.z

    def destroy(self) -> None:
        """Release the gloo/NCCL communicators (runs that build many grids in one world)."""
        for group in self.groups.values():
            dist.destroy_process_group(group)
        self.groups.clear()


def build_mesh(grid: Grid) -> Mesh:
    """Create the X, Y, Z and data groups of `grid` on the initialised default group."""
    rank = dist.get_rank()
    mesh = Mesh(grid=grid, rank=rank)
    for kind in KINDS:
        for ranks in grid.group_ranks(kind):
            group = dist.new_group(ranks=ranks, group_desc=f"axsim_{kind}")
            if rank in ranks:
                mesh.groups[kind] = group
    return mesh
