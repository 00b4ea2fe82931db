"""Process groups: for each group kind, a partition of (some of) the ranks into instances.

A group kind ("x", "data", "tp", ...) has instances of equal size; each instance is a row
of member ranks in member-position order (the order rings are built in). Programs name
group kinds; a rank's instance is looked up here, so programs stay rank-independent.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from workloads.errors import WorkloadError


@dataclass(frozen=True, eq=False)
class GroupKind:
    """All instances of one group kind."""

    name: str
    members: np.ndarray  # (instances, size) int64
    instance_of: np.ndarray  # (world,) int64, -1 for ranks outside every instance
    position_of: np.ndarray  # (world,) int64, -1 likewise

    @property
    def size(self) -> int:
        return int(self.members.shape[1])

    @property
    def num_instances(self) -> int:
        return int(self.members.shape[0])

    def instance_members(self, rank: int) -> np.ndarray:
        """The members of `rank`'s instance (raises if rank is not in this kind)."""
        inst = int(self.instance_of[rank])
        if inst < 0:
            raise WorkloadError(f"rank {rank} is not a member of any '{self.name}' group")
        return self.members[inst]


def build_group_kind(
    name: str, members: np.ndarray | list[list[int]], world_size: int
) -> GroupKind:
    """Validate a partition and index it. Ranks may appear at most once."""
    arr = np.asarray(members, dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] < 1:
        raise WorkloadError(f"group '{name}': members must be a non-empty 2-D table of ranks")
    flat = arr.ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= world_size):
        raise WorkloadError(f"group '{name}': rank out of range 0..{world_size - 1}")
    instance_of = np.full(world_size, -1, dtype=np.int64)
    position_of = np.full(world_size, -1, dtype=np.int64)
    counts = np.bincount(flat, minlength=world_size)
    if counts.max(initial=0) > 1:
        dup = int(np.argmax(counts))
        raise WorkloadError(f"group '{name}': rank {dup} appears in more than one instance")
    rows = np.repeat(np.arange(arr.shape[0]), arr.shape[1])
    cols = np.tile(np.arange(arr.shape[1]), arr.shape[0])
    instance_of[flat] = rows
    position_of[flat] = cols
    return GroupKind(name=name, members=arr, instance_of=instance_of, position_of=position_of)


class ProcessGroups(Mapping[str, GroupKind]):
    """The group kinds of a workload, by name."""

    def __init__(
        self, world_size: int, kinds: Mapping[str, np.ndarray | list[list[int]]] | None = None
    ):
        if world_size < 1:
            raise WorkloadError(f"world size must be positive, got {world_size}")
        self.world_size = world_size
        self._kinds: dict[str, GroupKind] = {}
        for name, members in (kinds or {}).items():
            self.add(name, members)

    def add(self, name: str, members: np.ndarray | list[list[int]]) -> GroupKind:
        kind = build_group_kind(name, members, self.world_size)
        self._kinds[name] = kind
        return kind

    def __getitem__(self, name: str) -> GroupKind:
        try:
            return self._kinds[name]
        except KeyError:
            raise WorkloadError(
                f"unknown process group '{name}' (have: {', '.join(sorted(self._kinds)) or 'none'})"
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._kinds)

    def __len__(self) -> int:
        return len(self._kinds)


def strided_groups(world_size: int, size: int, stride: int) -> np.ndarray:
    """Instances of `size` ranks spaced `stride` apart, covering all ranks.

    E.g. world 8, size 2, stride 1 -> (0,1)(2,3)(4,5)(6,7); stride 2 -> (0,2)(1,3)(4,6)(5,7).
    """
    if size < 1 or stride < 1 or world_size % (size * stride) != 0:
        raise WorkloadError(
            f"cannot tile {world_size} ranks into groups of {size} with stride {stride}"
        )
    ranks = np.arange(world_size, dtype=np.int64).reshape(-1, size, stride)
    return ranks.transpose(0, 2, 1).reshape(-1, size)
