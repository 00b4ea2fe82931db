"""The Timeline: one record per op per rank, shared by simulated and measured runs.

Measured (parsed Kineto traces) and simulated runs produce the same schema, so validation
is a join of two timelines. Storage is columnar per rank (numpy arrays) and materialised
lazily: a simulated 1,024-rank run keeps compact per-rank time arrays and builds a
`RankTimeline` only when a report, exporter or comparison asks for that rank.

Record fields: rank, stream, name, kind, group, start_s, end_s, bytes, flops, phase.
`kind` is a compute kind (gemm, attention, elementwise, optimizer, memcpy, quantize), a
collective kind (all-reduce, ... , send-recv) or "wait". `group` is the process-group kind
("" for compute). For collectives, `start_s` is when the rank launched the op (its kernel
starts spinning) and `sync_start_s` when the last participant arrived. Simulated compute
records also say how much of their duration is the launch gap (`launch_s`) and the
interference stretch under overlapping communication (`interference_s`), and when the
host had issued each op (`issue_s`: a kernel cannot start earlier); measured timelines
leave them None (a profiler sees only the kernel).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

COMPUTE_KINDS = frozenset({"gemm", "attention", "elementwise", "optimizer", "memcpy", "quantize"})
COMM_KINDS = frozenset(
    {
        "all-reduce",
        "all-gather",
        "reduce-scatter",
        "all-to-all",
        "broadcast",
        "reduce",
        "send-recv",
        "ring-exchange",
    }
)
FIELDS = (
    "rank",
    "stream",
    "name",
    "kind",
    "group",
    "start_s",
    "end_s",
    "bytes",
    "flops",
    "phase",
)


@dataclass(frozen=True, eq=False)
class RankTimeline:
    """Columnar records of one rank, ordered as issued (simulated) or by start (measured)."""

    rank: int
    stream: np.ndarray
    name: np.ndarray
    kind: np.ndarray
    group: np.ndarray
    start_s: np.ndarray
    end_s: np.ndarray
    bytes: np.ndarray
    flops: np.ndarray
    phase: np.ndarray
    sync_start_s: np.ndarray | None = None
    launch_s: np.ndarray | None = None
    interference_s: np.ndarray | None = None
    issue_s: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.start_s.shape[0])

    @property
    def duration_s(self) -> np.ndarray:
        return self.end_s - self.start_s

    def mask_compute(self) -> np.ndarray:
        return np.isin(self.kind, list(COMPUTE_KINDS))

    def mask_comm(self) -> np.ndarray:
        return np.isin(self.kind, list(COMM_KINDS))

    def select(self, mask: np.ndarray) -> RankTimeline:
        """A RankTimeline with only the records where `mask` is true."""
        sync = None if self.sync_start_s is None else self.sync_start_s[mask]
        launch = None if self.launch_s is None else self.launch_s[mask]
        interference = None if self.interference_s is None else self.interference_s[mask]
        issue = None if self.issue_s is None else self.issue_s[mask]
        return RankTimeline(
            rank=self.rank,
            stream=self.stream[mask],
            name=self.name[mask],
            kind=self.kind[mask],
            group=self.group[mask],
            start_s=self.start_s[mask],
            end_s=self.end_s[mask],
            bytes=self.bytes[mask],
            flops=self.flops[mask],
            phase=self.phase[mask],
            sync_start_s=sync,
            launch_s=launch,
            interference_s=interference,
            issue_s=issue,
        )

    def records(self) -> Iterator[dict[str, object]]:
        """Row dicts (for CSV/JSON export and tests)."""
        for i in range(len(self)):
            yield {
                "rank": self.rank,
                "stream": str(self.stream[i]),
                "name": str(self.name[i]),
                "kind": str(self.kind[i]),
                "group": str(self.group[i]),
                "start_s": float(self.start_s[i]),
                "end_s": float(self.end_s[i]),
                "bytes": float(self.bytes[i]),
                "flops": float(self.flops[i]),
                "phase": str(self.phase[i]),
            }


def rank_timeline_from_records(rank: int, rows: Sequence[dict[str, object]]) -> RankTimeline:
    """Build a RankTimeline from row dicts with the FIELDS keys (missing numbers = 0)."""

    def col(key: str, dtype: type | str, default: object) -> np.ndarray:
        return np.array([r.get(key, default) for r in rows], dtype=dtype)

    return RankTimeline(
        rank=rank,
        stream=col("stream", object, ""),
        name=col("name", object, ""),
        kind=col("kind", object, ""),
        group=col("group", object, ""),
        start_s=col("start_s", np.float64, 0.0),
        end_s=col("end_s", np.float64, 0.0),
        bytes=col("bytes", np.float64, 0.0),
        flops=col("flops", np.float64, 0.0),
        phase=col("phase", object, ""),
    )


@dataclass(eq=False)
class Timeline:
    """All ranks of one run. Ranks may be materialised lazily.

    `ranks` lists the ranks that have records. In a symmetric simulation only class
    representatives are simulated; `representative[r]` maps every rank to the rank whose
    records stand for it (identity otherwise), and `rank(r)` answers for any rank.
    """

    ranks: tuple[int, ...]
    world_size: int
    source: str
    loader: Callable[[int], RankTimeline]
    representative: np.ndarray | None = None
    link_bytes: np.ndarray | None = None
    iteration_bounds_s: tuple[tuple[float, float], ...] = ()
    metadata: dict[str, object] = field(default_factory=dict)
    # the latest record end of a simulated rank (`rank_end_s`) without building its
    # records: finding the rank that finishes last must not hold every rank's records
    end_of: Callable[[int], float | None] | None = None
    _cache: dict[int, RankTimeline] = field(default_factory=dict, repr=False)

    @classmethod
    def from_rank_timelines(
        cls,
        timelines: Sequence[RankTimeline],
        world_size: int | None = None,
        source: str = "measured",
        **kw: object,
    ) -> Timeline:
        by_rank = {t.rank: t for t in timelines}
        ranks = tuple(sorted(by_rank))
        ws = world_size if world_size is not None else (max(ranks) + 1 if ranks else 0)
        return cls(ranks=ranks, world_size=ws, source=source, loader=by_rank.__getitem__, **kw)  # type: ignore[arg-type]

    def rank(self, r: int) -> RankTimeline:
        """Records of rank `r` (its representative's records, relabelled, if symmetric)."""
        rep = r if self.representative is None else int(self.representative[r])
        tl = self._cache.get(rep)
        if tl is None:
            tl = self.loader(rep)
            self._cache[rep] = tl
        if rep != r:
            from dataclasses import replace

            tl = replace(tl, rank=r)
        return tl

    def rank_end_s(self, r: int) -> float:
        """Latest end of rank `r`'s records (0 if none): what `rank(r).end_s.max(initial=0.0)`
        gives, from `end_of` where the loader's source provides it (a full-mode run of 1,024
        ranks held every rank's records only to find the last to finish)."""
        rep = r if self.representative is None else int(self.representative[r])
        if self.end_of is not None and rep not in self._cache:
            got = self.end_of(rep)
            if got is not None:
                return got
        return float(self.rank(r).end_s.max(initial=0.0))

    def __iter__(self) -> Iterator[RankTimeline]:
        for r in self.ranks:
            yield self.rank(r)

    @property
    def end_s(self) -> float:
        """Latest end time over the simulated/measured ranks."""
        return max((self.rank_end_s(r) for r in self.ranks), default=0.0)

    @property
    def start_s(self) -> float:
        return min((float(self.rank(r).start_s.min(initial=0.0)) for r in self.ranks), default=0.0)
