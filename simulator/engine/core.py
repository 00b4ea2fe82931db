"""The discrete-event engine: per-rank programs replayed on streams, with overlap.

Semantics (docs/DESIGN.md): each simulated rank issues its program in order onto streams
(one compute stream, one per communicator). An op starts when its dependencies are done
and its stream is free. A collective starts when every participant has reached it; the
network model then prices it on the topology.

Implementation: every stream of every simulated rank is advanced eagerly ("look-ahead")
through ops whose predecessors' end times are known; compute ops have known durations, so
only collectives in flight stop a stream. Collective activations and completions are simpy
events, so the network sees them in time order; any op processed at simulated time t
starts at or after t. Times are integer picoseconds.
"""

from __future__ import annotations

import time
from array import array
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field, replace

import numpy as np
import simpy

from simulator.cost.model import CostModel
from simulator.engine.compiled import (
    COLL,
    COMPUTE,
    PS_PER_S,
    SEND,
    WAIT,
    CommInfo,
    CompiledProgram,
    compile_program,
)
from simulator.engine.modes import RankView, choose_view
from simulator.engine.network import Activation, NetworkStats, build_network
from simulator.engine.steady import SkipRun, barrier_ops, plan_skips
from simulator.engine.timeline_build import rank_timeline
from simulator.errors import EngineError
from simulator.outputs.timeline import Timeline
from topologies.positions import node_position_classes
from topologies.types import Topology
from workloads.graph import OpGraph

ProgressFn = Callable[[int, int, float], None]
"""progress(ops_done, ops_total, simulated_time_s)."""


class MaterializationRequired(EngineError):
    """The workload's compressed repetition cannot be used; expand it and run again."""


@dataclass(eq=False)
class _Rank:
    rank: int
    gpu: int
    prog: CompiledProgram
    start: array
    end: array
    pos: list[int]
    free: list[int]
    inflight: list[int]
    waiters: dict[int, list[int]] = field(default_factory=dict)
    sync: dict[int, int] = field(default_factory=dict)
    groups: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # kc, expected, position


@dataclass(eq=False)
class _Pending:
    count: int = 0
    ready: int = 0
    parts: list[tuple[_Rank, int, int]] = field(default_factory=list)


def split_classes_by_position(
    graph: OpGraph, topology: Topology, placement: np.ndarray | None
) -> OpGraph:
    """The workload's rank classes, split by GPU position in the node where the node's
    GPUs are wired differently (topologies/positions.py says why), else unchanged."""
    positions = node_position_classes(topology)
    if positions is None or graph.rank_class is None:
        return graph
    ranks = np.arange(graph.world_size) if placement is None else np.asarray(placement)
    pairs = np.stack([graph.rank_class, positions[ranks]], axis=1)
    _, split = np.unique(pairs, axis=0, return_inverse=True)
    return replace(graph, rank_class=split.reshape(-1).astype(np.int64))


MAX_SIMULATED_DAYS = np.iinfo(np.int64).max / PS_PER_S / 86400
# The most op instances (simulated ranks x their program's ops) one run simulates.
# Measured on the 2-core development machine (full mode, GPT-80B on Perlmutter, README
# bench): 5.7 us and ~88 bytes per op instance, so 2^26 bound a run near 6-7 minutes and
# 6 GB; the largest full-mode bench case (4,096 GPUs) simulates 38 M.
MAX_SIMULATED_OPS = 2**26


def check_simulated_ops(graph: OpGraph, view: RankView) -> None:
    """EngineError before any work when the view would simulate more than
    MAX_SIMULATED_OPS op instances (a full-mode run of a huge machine)."""
    lengths = np.array([len(p.ops) for p in graph.programs], dtype=np.int64)
    total = int(lengths[graph.rank_program[view.reps]].sum())
    if total > MAX_SIMULATED_OPS:
        why = "" if view.mode == "symmetric" else f" in full mode ({view.reason})"
        raise EngineError(
            f"the run would simulate {view.reps.size:,} ranks{why}, {total:,} ops in all, "
            f"more than the engine's {MAX_SIMULATED_OPS:,}: use engine.mode=auto (one rank "
            "per class), fewer GPUs or a smaller model"
        )


@dataclass(eq=False)
class EngineResult:
    """What a run produced: the timeline plus counters for reports and benchmarks."""

    timeline: Timeline
    mode: str
    network_model: str
    iteration_time_s: float
    ops_processed: int
    ops_represented: int
    simpy_events: int
    wall_time_s: float
    link_bytes: np.ndarray
    network_stats: NetworkStats
    skipped_segments: int
    setup_time_s: float = 0.0  # compiling programs and binding collective patterns

    @property
    def events_per_s(self) -> float:
        """Event rate of the event-processing phase (setup excluded)."""
        busy = self.wall_time_s - self.setup_time_s
        return self.events / busy if busy > 0 else 0.0

    @property
    def events(self) -> int:
        """Discrete events the engine handled: the start and the completion of every op it
        simulated (2 per op; copied steady-state segments are not counted) plus the events
        it scheduled in simpy (collective activations, phase starts, re-pricing, checks)."""
        return 2 * self.ops_processed + self.simpy_events


class Engine:
    """Replays an OpGraph on a topology under a cost model."""

    def __init__(
        self,
        graph: OpGraph,
        topology: Topology,
        cost: CostModel,
        mode: str = "auto",
        placement: np.ndarray | None = None,
        stragglers: dict[int, float] | None = None,
        steady_state: bool = True,
        progress: ProgressFn | None = None,
    ):
        self.graph = graph
        self.topology = topology
        self.cost = cost
        for r in stragglers or {}:
            if not 0 <= r < graph.world_size:
                raise EngineError(f"straggler rank {r} is outside 0..{graph.world_size - 1}")
        # a slowdown of exactly 1 changes nothing, so it must not force the full mode
        self.stragglers = {r: f for r, f in (stragglers or {}).items() if f != 1.0}
        if mode != "full" and graph.rank_class is not None:
            graph = split_classes_by_position(graph, topology, placement)
            self.graph = graph
        self.view: RankView = choose_view(graph, mode, bool(self.stragglers))
        check_simulated_ops(graph, self.view)
        cost.pricer.tuner = "bottleneck" if cost.network == "alpha-beta" else "shared"
        if placement is None:
            if graph.world_size > topology.num_gpus:
                raise EngineError(
                    f"the workload has {graph.world_size} ranks but the topology only {topology.num_gpus} GPUs"
                )
            placement = np.arange(graph.world_size, dtype=np.int64)
        self.placement = np.asarray(placement, dtype=np.int64)
        if self.placement.shape != (graph.world_size,):
            raise EngineError("placement must map every rank to a GPU")
        if (
            self.placement.min() < 0
            or self.placement.max() >= topology.num_gpus
            or np.unique(self.placement).size != graph.world_size
        ):
            raise EngineError("placement must map ranks to distinct GPUs of the topology")
        self.steady_state = steady_state
        self.progress = progress

    # ------------------------------------------------------------------- run
    def run(self) -> EngineResult:
        t0 = time.perf_counter()
        try:
            result = self._run(skip=self.steady_state)
            if result is None:  # ranks drifted apart at a segment boundary: exact rerun
                result = self._run(skip=False)
        except OverflowError:
            # times are int64 picoseconds: an op of more than ~106 days (a bandwidth or a
            # slowdown off by orders of magnitude) cannot be represented
            raise EngineError(
                f"simulated time exceeds the engine's range ({MAX_SIMULATED_DAYS:.0f} days): "
                "an op would last longer; check the bandwidths, slowdowns and sizes"
            ) from None
        assert result is not None
        result.wall_time_s = time.perf_counter() - t0
        result.setup_time_s = self.setup_time_s
        return result

    def _setup(self) -> None:
        t0 = time.perf_counter()
        self._setup_inner()
        self.setup_time_s = time.perf_counter() - t0

    def _setup_inner(self) -> None:
        self.env = simpy.Environment()
        self.stats = NetworkStats()
        self.net = build_network(self.cost.network, self.env, self.cost.pricer, self.stats)
        self.pending: dict[tuple[object, ...], _Pending] = {}
        self.work: deque[tuple[_Rank, int]] = deque()
        self.instances_cache: dict[Hashable, tuple[Hashable, np.ndarray]] = {}
        self.group_gpus: dict[str, np.ndarray] = {}  # every instance of a group kind, as GPUs
        self.processed = 0
        # (first op, stop op, extra copies) of repeated bodies counted but not simulated
        self.virtual_copies: list[tuple[int, int, int]] = []
        self.next_report = 0
        compiled: dict[tuple[int, float], CompiledProgram] = {}
        durations: dict[object, int] = {}
        self.ranks: list[_Rank] = []
        for rep in self.view.reps.tolist():
            pidx = int(self.graph.rank_program[rep])
            factor = float(self.stragglers.get(rep, 1.0))
            cp = compiled.get((pidx, factor))
            if cp is None:
                cp = compile_program(
                    self.graph.programs[pidx],
                    self.cost.kernels,
                    factor,
                    self.cost.overlap_slowdown,
                    durations,
                    self._comm_estimator(rep) if self.cost.stretches_overlap else None,
                )
                compiled[(pidx, factor)] = cp
            n = cp.num_ops
            ns = len(cp.stream_names)
            self.ranks.append(
                _Rank(
                    rank=rep,
                    gpu=int(self.placement[rep]),
                    prog=cp,
                    start=array("q", [-1]) * n,
                    end=array("q", [-1]) * n,
                    pos=[0] * ns,
                    free=[0] * ns,
                    inflight=[-1] * ns,
                )
            )
        self.ops_total = sum(r.prog.program.represented_ops for r in self.ranks)
        self.program_end = max((r.prog.num_ops for r in self.ranks), default=0)
        self.gate = self.program_end

    def _comm_estimator(self, rank: int):
        """Isolated duration estimates of `rank`'s communication ops (for overlap)."""
        pricer = self.cost.pricer
        view = self.view

        def estimate(info) -> float:
            # every instance of the group kind at once (as in a lockstep iteration), the same
            # in both engine modes so both stretch the same ops
            gv = view.groups[info.group]
            if info.peer >= 0:
                own = int(gv.position_of[rank])
                src, dst = own, info.peer
                rows = self.placement[gv.members[:, [src, dst]]]
                key: Hashable = (info.group, "all", src, dst)
            else:
                rows = self._group_gpus(info.group)
                key = (info.group, "all")
            bundles = pricer.bundles(info.kind, rows, info.nbytes, info.root, info.algorithm, key)
            return max(
                (pricer.estimate_time_s(b, info.nbytes, info.kind) for b in bundles), default=0.0
            )

        return estimate

    def _run(self, skip: bool) -> EngineResult | None:
        self._setup()
        t0 = time.perf_counter()
        runs = self._skip_plan() if skip else []
        self.setup_time_s += time.perf_counter() - t0  # proving repetition is setup too
        self._require_proof(runs)
        skipped = 0
        for run in runs:
            b_i, b_next = run.first.start, run.segments[1].start
            t_i = self._run_until(b_i)
            if t_i is None:  # ranks reach the boundary apart: resuming would rewind time
                self._require_proof([])
                return None
            snapshot = self.stats.snapshot()
            t_next = self._run_until(b_next)
            if t_next is None:
                self._require_proof([])
                return None
            self._copy_segments(run, t_next - t_i)
            copies = sum(seg.repeat for seg in run.segments) - 1
            self.stats.repeat_since(snapshot, copies)
            skipped += copies
            virtual = sum(seg.repeat - 1 for seg in run.segments)
            if virtual:
                self.virtual_copies.append((run.first.start, run.first.stop, virtual))
        if self._run_until(self.program_end) is None:
            self._require_proof([])
            return None
        return self._result(skipped)

    def _require_proof(self, runs: list[SkipRun]) -> None:
        """A compressed program (segments standing for several copies) can only be run when
        every such segment lies in a run whose repetition is proven exact. The run's first
        body is simulated and its copies follow it; a later body stands at its last copy."""
        covered = {(s.start, s.stop) for run in runs for s in run.segments}
        for r in self.ranks:
            for seg in r.prog.program.segments:
                if seg.repeat > 1 and (seg.start, seg.stop) not in covered:
                    raise MaterializationRequired(
                        "the repeated microbatches of this workload cannot be proven identical here "
                        "(e.g. ranks drift apart); expand them"
                    )

    def _skip_plan(self) -> list[SkipRun]:
        programs = {id(r.prog.program): r.prog.program for r in self.ranks}
        if len(programs) != 1:
            return []
        program = next(iter(programs.values()))
        runs = plan_skips(program)
        if runs:
            bounds = sorted(
                {
                    b
                    for run in runs
                    for b in (run.first.start, run.segments[1].start, run.segments[-1].stop)
                }
            )
            self.barriers = barrier_ops(program, bounds)
        return runs

    def _run_until(self, gate: int) -> int | None:
        """Simulate every op before `gate`; return the common barrier time of all ranks,
        or None if the ranks do not reach it at one instant (no exact skipping then)."""
        self.gate = gate
        for r in self.ranks:
            for s in range(len(r.prog.stream_names)):
                self.work.append((r, s))
        self._drain()
        self.env.run()
        self._check_finished(gate)
        if gate >= self.program_end:
            return 0
        w = getattr(self, "barriers", {}).get(gate, -1)
        times = {0 if w < 0 else r.end[w] for r in self.ranks}
        if len(times) != 1:
            return None
        return times.pop()

    # ---------------------------------------------------------------- streams
    def _drain(self) -> None:
        work = self.work
        advance = self._advance
        while work:
            r, s = work.popleft()
            advance(r, s)
        if self.progress is not None and self.processed >= self.next_report:
            self.next_report = self.processed + 20000
            self.progress(self.processed, self.ops_total, self.env.now / PS_PER_S)

    def _advance(self, r: _Rank, s: int) -> None:
        prog = r.prog
        ops = prog.stream_ops[s]
        pos = r.pos[s]
        n = len(ops)
        if pos >= n:
            return
        inflight = r.inflight[s]
        if ops[pos] == inflight:
            return
        kind, deps, dur, issue = prog.kind, prog.deps, prog.dur_ps, prog.issue_ps
        end, start = r.end, r.start
        free = r.free[s]
        gate = self.gate
        waiters = r.waiters
        done = 0
        while pos < n:
            i = ops[pos]
            if i >= gate or i == inflight:
                break
            t = issue[i] if issue[i] > free else free
            blocked = -1
            for d in deps[i]:
                e = end[d]
                if e < 0:
                    blocked = d
                    break
                if e > t:
                    t = e
            if blocked >= 0:
                lst = waiters.get(blocked)
                if lst is None:
                    waiters[blocked] = [s]
                elif s not in lst:
                    lst.append(s)
                break
            k = kind[i]
            if k in (COMPUTE, WAIT):
                e = t + dur[i]
                start[i] = t
                end[i] = e
                free = e
                pos += 1
                done += 1
                if waiters:
                    waiting = waiters.pop(i, None)
                    if waiting:
                        self.work.extend([(r, x) for x in waiting])
                continue
            start[i] = t
            r.inflight[s] = i
            r.pos[s], r.free[s] = pos, free
            self.processed += done
            self._arrive(r, i, s, t)
            return
        r.pos[s], r.free[s] = pos, free
        self.processed += done

    # -------------------------------------------------------------- rendezvous
    def _group_keys(self, r: _Rank, group: str) -> tuple[int, int, int]:
        """(rendezvous key component, expected arrivals, position) of a rank's group."""
        got = r.groups.get(group)
        if got is None:
            gv = self.view.groups[group]
            kc = int(gv.key_of_rank[r.rank])
            got = (kc, int(gv.expected[kc]), int(gv.position_of[r.rank]))
            r.groups[group] = got
        return got

    def _arrive(self, r: _Rank, i: int, s: int, ready: int) -> None:
        info = r.prog.comm[i]
        assert info is not None
        kc, expected, own = self._group_keys(r, info.group)
        k = r.prog.kind[i]
        if k == COLL:
            key: tuple[object, ...] = (info.group, kc, info.ordinal)
        else:
            gv = self.view.groups[info.group]
            src, dst = (own, info.peer) if k == SEND else (info.peer, own)
            key = (info.group, kc, src, dst, info.ordinal)
            expected = (
                2
                if self.view.mode == "full"
                else len({self._class_at(gv, kc, src), self._class_at(gv, kc, dst)})
            )
        p = self.pending.get(key)
        if p is None:
            p = _Pending()
            self.pending[key] = p
        p.count += 1
        p.parts.append((r, i, s))
        if ready > p.ready:
            p.ready = ready
        if p.count == expected:
            del self.pending[key]
            self._launch(key, p, r, i)

    def _class_at(self, gv: object, kc: int, pos: int) -> int:
        rc = self.graph.rank_class
        assert rc is not None
        members = gv.members  # type: ignore[attr-defined]
        rows = gv.rows[kc]  # type: ignore[attr-defined]
        return int(rc[members[rows[0], pos]])

    def _instances(self, group: str, key: tuple[object, ...]) -> tuple[Hashable, np.ndarray]:
        """(pricing key, GPU table) of the instances an activation covers (cached)."""
        ck = (group, *key[1:2], *key[2:4]) if len(key) == 5 else (group, key[1])
        got = self.instances_cache.get(ck)
        if got is not None:
            return got
        gv = self.view.groups[group]
        kc = int(key[1])  # type: ignore[call-overload]
        rows = gv.rows[kc]
        whole = rows.shape[0] == gv.members.shape[0]  # every instance: share pricing caches
        if len(key) == 3:
            ikey: Hashable = (group, "all") if whole else (group, self.view.mode, kc)
            inst = self.placement[gv.members[rows]]
        else:
            src, dst = int(key[2]), int(key[3])  # type: ignore[call-overload]
            ikey = (group, "all", src, dst) if whole else (group, self.view.mode, kc, src, dst)
            inst = self.placement[gv.members[rows][:, [src, dst]]]
        self.instances_cache[ck] = (ikey, inst)
        return ikey, inst

    def _algorithm(self, info: CommInfo) -> str | None:
        """The algorithm of a collective: the program's, or the tuner's choice for every
        instance of its group kind at once (whatever part of them this activation covers),
        so that the full and the symmetric mode run the same algorithm."""
        pricer = self.cost.pricer
        if info.algorithm is not None or info.peer >= 0 or pricer.algorithm != "auto":
            return info.algorithm
        rows = self._group_gpus(info.group)
        return pricer.choose_algorithm(info.kind, rows, info.nbytes, info.root, (info.group, "all"))

    def _group_gpus(self, group: str) -> np.ndarray:
        """GPU table of every instance of a group kind (built once: this runs per launch)."""
        got = self.group_gpus.get(group)
        if got is None:
            got = self.group_gpus[group] = self.placement[self.view.groups[group].members]
        return got

    def _launch(self, key: tuple[object, ...], p: _Pending, r: _Rank, i: int) -> None:
        info = r.prog.comm[i]
        assert info is not None
        ikey, inst = self._instances(info.group, key)
        start = p.ready
        if start < self.env.now:
            raise EngineError("internal error: a collective would start in the simulated past")
        parts = p.parts
        act = Activation(
            kind=info.kind,
            nbytes=info.nbytes,
            instances=inst,
            key=ikey,
            on_done=lambda end: self._resolve(parts, start, end),
            root=info.root,
            algorithm=self._algorithm(info),
        )
        self.net.submit(act, start)

    def _resolve(self, parts: list[tuple[_Rank, int, int]], start: int, end: int) -> None:
        work = self.work
        for r, i, s in parts:
            r.end[i] = end
            r.sync[i] = start
            r.free[s] = end
            r.pos[s] += 1
            r.inflight[s] = -1
            work.append((r, s))
            if r.waiters:
                waiting = r.waiters.pop(i, None)
                if waiting:
                    work.extend([(r, x) for x in waiting])
        self.processed += len(parts)
        self._drain()

    # ------------------------------------------------------------ completion
    def _check_finished(self, gate: int) -> None:
        if self.pending:
            key, p = next(iter(self.pending.items()))
            r, i, _ = p.parts[0]
            op = r.prog.program.ops[i]
            raise EngineError(
                f"deadlock: collective '{op.name}' on group '{key[0]}' reached by {p.count} participant(s) of "
                f"{self._expected(key)} (rank {r.rank} waits); the others never issue it"
            )
        for r in self.ranks:
            ops = r.prog.stream_ops
            for s, pos in enumerate(r.pos):
                if pos < len(ops[s]) and ops[s][pos] < gate:
                    i = ops[s][pos]
                    op = r.prog.program.ops[i]
                    raise EngineError(
                        f"deadlock: rank {r.rank} cannot start op {i} ('{op.name}') on stream '{r.prog.stream_names[s]}'"
                    )

    def _expected(self, key: tuple[object, ...]) -> int:
        gv = self.view.groups[str(key[0])]
        return int(gv.expected[int(key[1])]) if len(key) == 3 else 2  # type: ignore[call-overload]

    # ------------------------------------------------------- steady state copy
    def _copy_segments(self, run: SkipRun, shift: int) -> None:
        first = run.first
        for r in self.ranks:
            st = np.frombuffer(r.start, dtype=np.int64)
            en = np.frombuffer(r.end, dtype=np.int64)
            comm_ops = [i for i in r.sync if first.start <= i < first.stop]
            before = first.repeat  # copies run before the next materialised segment
            for seg in run.segments[1:]:
                off = seg.start - first.start
                # a later body standing for several copies sits at its last copy, so what
                # follows continues from the right time; the others are virtual_copies
                k = before + seg.repeat - 1
                st[seg.start : seg.stop] = st[first.start : first.stop] + k * shift
                en[seg.start : seg.stop] = en[first.start : first.stop] + k * shift
                for i in comm_ops:
                    r.sync[i + off] = r.sync[i] + k * shift
                before += seg.repeat
            last = run.segments[-1].stop
            for s, ops in enumerate(r.prog.stream_ops):
                p = bisect_left(ops, last)
                if p > r.pos[s]:
                    r.pos[s] = p
                    r.free[s] = r.end[ops[p - 1]]

    # --------------------------------------------------------------- results
    def _result(self, skipped: int) -> EngineResult:
        end_ps = 0
        for r in self.ranks:
            e = max(r.end) if len(r.end) else 0
            end_ps = max(end_ps, e)
        cache: dict[int, object] = {}
        by_rank = {r.rank: r for r in self.ranks}

        def loader(rank: int):
            rr = by_rank[rank]
            return rank_timeline(rr.rank, rr.prog, rr.start, rr.end, rr.sync, cache)

        timeline = Timeline(
            ranks=tuple(sorted(by_rank)),
            world_size=self.graph.world_size,
            source="simulated",
            loader=loader,
            representative=self.view.representative,
            link_bytes=self.stats.link_bytes(self.topology.num_links),
            metadata={
                "mode": self.view.mode,
                "network": self.cost.network,
                # (first op, stop op, extra copies): records [first, stop) of every simulated
                # rank stand for `extra` more identical copies not in the timeline
                "virtual_copies": list(self.virtual_copies),
            },
        )
        return EngineResult(
            timeline=timeline,
            mode=self.view.mode,
            network_model=self.cost.network,
            iteration_time_s=end_ps / PS_PER_S,
            ops_processed=self.processed,
            ops_represented=self.ops_total,
            simpy_events=self.stats.simpy_events,
            wall_time_s=0.0,
            link_bytes=timeline.link_bytes if timeline.link_bytes is not None else np.zeros(0),
            network_stats=self.stats,
            skipped_segments=skipped,
        )
