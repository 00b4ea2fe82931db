"""Programs and the OpGraph: what every rank of a training iteration issues, in order.

Why programs are shared: at 32,768 ranks an explicit op list per rank would not fit on a
laptop. Ranks that issue the same sequence (every rank of AxoNN's 4D algorithm; every rank
of one pipeline stage) share one `Program`, and communication ops name group *kinds*, so the
OpGraph stays as small as one rank's program times the number of distinct programs.

`rank_class` optionally partitions ranks into classes whose members are interchangeable
(same program, and every collective's peers fall in the same classes). The engine's
symmetric mode simulates one representative per class.

`Program.segments` optionally marks repeated bodies (e.g. identical microbatches). The
engine may skip repeated segments when it can prove the result identical.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from workloads.errors import WorkloadError
from workloads.groups import ProcessGroups
from workloads.ops import (
    CollectiveKind,
    CollectiveOp,
    Op,
    RecvOp,
    SendOp,
    WaitOp,
    op_dependencies,
)


@dataclass(frozen=True, slots=True)
class Segment:
    """ops[start:stop] of a program; segments with equal `key` have identical op bodies
    (same ops, deps shifted by the segment offset).

    `repeat` > 1 means the materialised ops stand for that many identical copies run back
    to back (a compressed run of microbatches). Only an engine that proves the copies
    identical may use such a program; otherwise it asks for the expanded one.
    """

    start: int
    stop: int
    key: str
    repeat: int = 1


@dataclass(frozen=True, eq=False)
class Program:
    """An ordered list of ops issued by every rank that runs it."""

    name: str
    ops: tuple[Op, ...]
    segments: tuple[Segment, ...] = ()

    def __len__(self) -> int:
        return len(self.ops)

    @property
    def represented_ops(self) -> int:
        """Ops the program stands for, counting every copy of repeated segments."""
        return len(self.ops) + sum((s.repeat - 1) * (s.stop - s.start) for s in self.segments)

    @property
    def compressed(self) -> bool:
        return any(s.repeat > 1 for s in self.segments)

    def streams(self) -> list[str]:
        """Stream names in order of first use."""
        seen: dict[str, None] = {}
        for op in self.ops:
            seen.setdefault(op.stream, None)
        return list(seen)


@dataclass(eq=False)
class OpGraph:
    """Per-rank programs of one training iteration plus their process groups."""

    world_size: int
    programs: tuple[Program, ...]
    rank_program: np.ndarray
    groups: ProcessGroups
    rank_class: np.ndarray | None = None
    name: str = "workload"
    metadata: dict[str, object] = field(default_factory=dict)

    @classmethod
    def from_rank_ops(
        cls,
        rank_ops: Mapping[int, Sequence[Op]],
        groups: ProcessGroups,
        name: str = "workload",
    ) -> OpGraph:
        """Build an OpGraph from an explicit op list per rank (handy for tests and small
        hand-written workloads). Identical lists share one Program."""
        world = groups.world_size
        if sorted(rank_ops) != list(range(world)):
            missing = sorted(set(range(world)) - set(rank_ops))
            raise WorkloadError(
                f"rank_ops must give a program for every rank; missing {missing[:5]}"
            )
        by_ops: dict[tuple[Op, ...], int] = {}
        programs: list[Program] = []
        rank_program = np.zeros(world, dtype=np.int64)
        for r in range(world):
            ops = tuple(rank_ops[r])
            idx = by_ops.get(ops)
            if idx is None:
                idx = len(programs)
                by_ops[ops] = idx
                programs.append(Program(name=f"p{idx}", ops=ops))
            rank_program[r] = idx
        return cls(world, tuple(programs), rank_program, groups, name=name)

    def program_of(self, rank: int) -> Program:
        return self.programs[int(self.rank_program[rank])]

    @property
    def num_ops(self) -> int:
        """Total ops over all ranks (counted, not materialised)."""
        sizes = np.array([len(p) for p in self.programs], dtype=np.int64)
        return int(sizes[self.rank_program].sum())

    # ------------------------------------------------------------- validation
    def validate(self) -> None:
        """Raise WorkloadError unless the graph can run without deadlock.

        Checks: every rank has a program; deps and wait targets exist; no dependency
        cycles (stream order included); communication ops name existing groups the rank
        belongs to; the members of every group instance issue the same collectives in the
        same order; sends and receives pair up.
        """
        if self.rank_program.shape != (self.world_size,):
            raise WorkloadError("rank_program must have one entry per rank")
        if self.rank_program.min(initial=0) < 0 or self.rank_program.max(initial=0) >= len(
            self.programs
        ):
            raise WorkloadError("rank_program refers to a program that does not exist")
        for program in self.programs:
            _check_program_dag(program)
        used = np.unique(self.rank_program)
        for p in used:
            _check_group_membership(self, int(p))
        _check_collectives_match(self)
        _check_p2p_pairs(self)
        if self.rank_class is not None:
            _check_rank_classes(self)


def _check_program_dag(program: Program) -> None:
    n = len(program.ops)
    indeg = np.zeros(n, dtype=np.int64)
    succ: list[list[int]] = [[] for _ in range(n)]
    last_on_stream: dict[str, int] = {}
    for i, op in enumerate(program.ops):
        if isinstance(op, WaitOp) and op.target == i:
            raise WorkloadError(f"program '{program.name}' op {i} ('{op.name}') waits on itself")
        preds = set(op_dependencies(op))
        for d in preds:
            if not isinstance(d, int | np.integer) or d < 0 or d >= n:
                raise WorkloadError(
                    f"program '{program.name}' op {i} ('{op.name}') has unknown dependency {d}"
                )
        prev = last_on_stream.get(op.stream)
        if prev is not None:
            preds.add(prev)
        last_on_stream[op.stream] = i
        for d in preds:
            succ[d].append(i)
            indeg[i] += 1
    ready = [i for i in range(n) if indeg[i] == 0]
    seen = 0
    while ready:
        i = ready.pop()
        seen += 1
        for j in succ[i]:
            indeg[j] -= 1
            if indeg[j] == 0:
                ready.append(j)
    if seen != n:
        stuck = int(np.flatnonzero(indeg > 0)[0])
        raise WorkloadError(
            f"program '{program.name}' has a dependency cycle through op {stuck} "
            f"('{program.ops[stuck].name}')"
        )


def _check_group_membership(graph: OpGraph, program_index: int) -> None:
    program = graph.programs[program_index]
    ranks = np.flatnonzero(graph.rank_program == program_index)
    names = {op.group for op in program.ops if isinstance(op, CollectiveOp | SendOp | RecvOp)}
    for g in names:
        kind = graph.groups[g]
        outside = ranks[kind.instance_of[ranks] < 0]
        if outside.size:
            raise WorkloadError(
                f"rank {int(outside[0])} issues a collective on group '{g}' but is not a member of any '{g}' group"
            )
    for i, op in enumerate(program.ops):
        if isinstance(op, SendOp | RecvOp):
            size = graph.groups[op.group].size
            if not 0 <= op.peer < size:
                raise WorkloadError(
                    f"program '{program.name}' op {i} ('{op.name}'): peer position {op.peer} outside group '{op.group}' of size {size}"
                )
        if isinstance(op, CollectiveOp):
            if op.bytes < 0:
                raise WorkloadError(
                    f"program '{program.name}' op {i} ('{op.name}'): negative bytes"
                )
            size = graph.groups[op.group].size
            if (
                op.kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE)
                and not 0 <= op.root < size
            ):
                raise WorkloadError(
                    f"program '{program.name}' op {i} ('{op.name}'): root {op.root} outside group '{op.group}'"
                )


def executed_ops(program: Program) -> Iterator[Op]:
    """The program's ops in the order a rank runs them, every copy of a repeated segment
    included (stages of one pipeline may compress different runs of passes, so what must
    match across ranks is what they run, not their texts)."""
    repeated = {s.start: s for s in program.segments if s.repeat > 1}
    ops = program.ops
    i = 0
    while i < len(ops):
        seg = repeated.get(i)
        if seg is None:
            yield ops[i]
            i += 1
            continue
        for _ in range(seg.repeat):
            yield from ops[seg.start : seg.stop]
        i = seg.stop


def _collective_signatures(program: Program) -> dict[str, tuple[tuple[object, ...], ...]]:
    sig: dict[str, list[tuple[object, ...]]] = defaultdict(list)
    for op in executed_ops(program):
        if isinstance(op, CollectiveOp):
            sig[op.group].append((op.tag, op.kind.value, float(op.bytes), op.root))
    return {g: tuple(v) for g, v in sig.items()}


def _check_collectives_match(graph: OpGraph) -> None:
    sigs = [_collective_signatures(p) for p in graph.programs]
    for g, kind in graph.groups.items():
        ids: dict[tuple[tuple[object, ...], ...], int] = {}
        sig_id = np.array([ids.setdefault(s.get(g, ()), len(ids)) for s in sigs], dtype=np.int64)
        member_sig = sig_id[graph.rank_program[kind.members]]
        bad = np.flatnonzero((member_sig != member_sig[:, :1]).any(axis=1))
        if bad.size:
            inst = int(bad[0])
            row = kind.members[inst]
            col = int(np.flatnonzero(member_sig[inst] != member_sig[inst, 0])[0])
            a, b = int(row[0]), int(row[col])
            sa, sb = sigs[graph.rank_program[a]].get(g, ()), sigs[graph.rank_program[b]].get(g, ())
            detail = _first_difference(sa, sb)
            raise WorkloadError(
                f"collective mismatch in group '{g}' instance {inst}: ranks {a} and {b} differ ({detail})"
            )


def _first_difference(
    sa: tuple[tuple[object, ...], ...], sb: tuple[tuple[object, ...], ...]
) -> str:
    for k, (x, y) in enumerate(zip(sa, sb, strict=False)):
        if x != y:
            return f"collective #{k}: tag/kind/bytes/root {x} vs {y}"
    return f"{len(sa)} vs {len(sb)} collectives"


def _p2p_lists(
    program: Program,
) -> dict[str, tuple[list[tuple[object, ...]], list[tuple[object, ...]]]]:
    out: dict[str, tuple[list[tuple[object, ...]], list[tuple[object, ...]]]] = defaultdict(
        lambda: ([], [])
    )
    for op in executed_ops(program):
        if isinstance(op, SendOp):
            out[op.group][0].append((op.peer, op.tag, float(op.bytes)))
        elif isinstance(op, RecvOp):
            out[op.group][1].append((op.peer, op.tag, float(op.bytes)))
    return dict(out)


def _check_p2p_pairs(graph: OpGraph) -> None:
    lists = [_p2p_lists(p) for p in graph.programs]
    groups_used = {g for d in lists for g in d}
    for g in sorted(groups_used):
        kind = graph.groups[g]
        rows = graph.rank_program[kind.members]
        combos, first = np.unique(rows, axis=0, return_index=True)
        for combo, inst in zip(combos, first, strict=True):
            for pos, prog in enumerate(combo):
                sends, _ = lists[int(prog)].get(g, ([], []))
                for peer, tag, _nbytes in sends:
                    if peer == pos:
                        raise WorkloadError(
                            f"send to itself in group '{g}' (position {pos}, tag {tag})"
                        )
            for pos, prog in enumerate(combo):
                for peer in range(len(combo)):
                    sends = [s for s in lists[int(prog)].get(g, ([], []))[0] if s[0] == peer]
                    recvs = [
                        (pos, t, b)
                        for (src, t, b) in lists[int(combo[peer])].get(g, ([], []))[1]
                        if src == pos
                    ]
                    sends_n = [(pos, t, b) for (_, t, b) in sends]
                    if sends_n != recvs:
                        a = int(kind.members[inst, pos])
                        b_rank = int(kind.members[inst, peer])
                        raise WorkloadError(
                            f"unpaired send/recv in group '{g}' between ranks {a} -> {b_rank}: "
                            f"{len(sends)} sends vs {len(recvs)} matching receives"
                        )


def _check_rank_classes(graph: OpGraph) -> None:
    rc = graph.rank_class
    assert rc is not None
    if rc.shape != (graph.world_size,):
        raise WorkloadError("rank_class must have one entry per rank")
    # members of a class must run the same program
    order = np.argsort(rc, kind="stable")
    cls_sorted = rc[order]
    prog_sorted = graph.rank_program[order]
    starts = np.flatnonzero(np.r_[True, cls_sorted[1:] != cls_sorted[:-1]])
    firsts = np.repeat(prog_sorted[starts], np.diff(np.r_[starts, cls_sorted.size]))
    if (firsts != prog_sorted).any():
        bad = int(order[np.flatnonzero(firsts != prog_sorted)[0]])
        raise WorkloadError(f"rank_class: rank {bad} runs a different program than its class")
