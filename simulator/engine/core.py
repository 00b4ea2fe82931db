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

Repeated regions (microbatches, steady pipeline pairs) are unrolled as ranks reach them
(simulator/engine/unroll.py); the periodic prover (simulator/engine/periodic.py) compares
the state at the same points of consecutive copies of the first simulated rank and, once
the whole state repeats shifted in time, skips the copies in the middle (`_warp`).
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace

import numpy as np
import simpy

from simulator.cost.interference import (
    NO_FOOTPRINT,
    Footprint,
    InterferenceModel,
    comm_stream_order,
    stream_setup,
)
from simulator.cost.model import CostModel
from simulator.cost.terms import Interference
from simulator.engine.compiled import (
    COLL,
    PS_PER_S,
    RECV,
    SEND,
    WAIT,
    CommInfo,
    CompiledProgram,
    Interplay,
    compile_program,
)
from simulator.engine.modes import RankView, choose_view
from simulator.engine.network import (
    Activation,
    ContentionNetwork,
    NetworkStats,
    build_network,
)
from simulator.engine.prover import Prover, Watch, private_links, rank_components
from simulator.engine.ranks import Pending as _Pending
from simulator.engine.ranks import RankState as _Rank
from simulator.engine.ranks import wait_for
from simulator.engine.refine import rank_seeds, refine_classes
from simulator.engine.regions import Region, find_regions
from simulator.engine.timeline import Timeline
from simulator.engine.timeline_build import (
    program_columns,
    rank_timeline,
    record_issue,
    text_times,
)
from simulator.engine.unroll import Unrolled, ordinal_key
from simulator.errors import EngineError
from topologies.positions import node_position_classes
from topologies.rows import distinct_count, unique_rows
from topologies.types import Topology
from workloads.graph import OpGraph, Program

ProgressFn = Callable[[int, int, float], None]
"""progress(ops_done, ops_total, simulated_time_s)."""


class _Launch:
    """What a collective's completion resolves: the participants' (rank, op, stream)."""

    __slots__ = ("act", "engine", "parts")

    def __init__(self, engine: Engine, parts: list[tuple[_Rank, int, int]]):
        self.engine = engine
        self.parts = parts
        self.act: Activation | None = None

    def __call__(self, end: int) -> None:
        assert self.act is not None
        self.engine._resolve(self.parts, self.act.start_ps, end)


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
    _, split = unique_rows(pairs)  # np.unique(pairs, axis=0)'s inverse, without its sort
    return replace(graph, rank_class=split.astype(np.int64))


def _stretches(overlap: float | Interference) -> bool:
    """Whether compute that overlaps communication is stretched at all."""
    return overlap.active if isinstance(overlap, Interference) else overlap != 1.0


MAX_SIMULATED_DAYS = np.iinfo(np.int64).max / PS_PER_S / 86400
# The most op instances (simulated ranks x their program's ops) one run simulates.
# Measured on the 2-core development machine (bench/scale.py, 2026-11-28, full mode
# GPT-80B on 4,096 Perlmutter GPUs, the largest case: 35.7 M op instances simulated,
# 229.7 s wall, peak RSS 1.44 GiB): 6.4 us and ~43 bytes per op instance (RSS including
# the interpreter), so 2^26 bound a run near 7 minutes and 2.9 GB.
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
        self.placement = self._placement(placement)
        workload = graph
        if mode != "full" and graph.rank_class is not None:
            graph = split_classes_by_position(graph, topology, self.placement)

        def refine() -> np.ndarray:
            factors = np.ones(workload.world_size)
            for r, f in self.stragglers.items():
                factors[r] = f
            seeds = rank_seeds(workload, topology, self.placement, factors, cost.gpu_mix)
            return refine_classes(workload, seeds)

        self.view, self.graph = choose_view(graph, mode, self._differences(), refine)
        check_simulated_ops(self.graph, self.view)
        cost.pricer.tuner = "bottleneck" if cost.network == "alpha-beta" else "shared"
        self.steady_state = steady_state
        self.progress = progress
        # isolated estimates of each rank's communication ops (overlap, footprints)
        self._estimates: dict[int, dict[tuple[object, ...], float]] = {}
        # per simulated rank, the communicator streams sharing the compute stream's queue
        self.serialised: dict[int, frozenset[str]] = {}

    def _placement(self, placement: np.ndarray | None) -> np.ndarray:
        """The rank -> GPU index map, checked (default: rank r on GPU r)."""
        graph, topology = self.graph, self.topology
        if placement is None:
            if graph.world_size > topology.num_gpus:
                raise EngineError(
                    f"the workload has {graph.world_size} ranks but the topology only {topology.num_gpus} GPUs"
                )
            placement = np.arange(graph.world_size, dtype=np.int64)
        out = np.asarray(placement, dtype=np.int64)
        if out.shape != (graph.world_size,):
            raise EngineError("placement must map every rank to a GPU")
        if (
            out.min() < 0
            or out.max() >= topology.num_gpus
            or distinct_count(out) != graph.world_size
        ):
            raise EngineError("placement must map ranks to distinct GPUs of the topology")
        return out

    def _differences(self) -> str:
        """What makes some ranks differ on their own ("" when nothing does)."""
        out = []
        n = len(self.stragglers)
        if n:
            out.append(f"{n} straggler{'s' if n > 1 else ''}")
        mix = self.cost.gpu_mix
        if mix is not None:
            types = distinct_count(mix[self.placement])
            if types > 1:
                out.append(f"{types} GPU types")
        return " and ".join(out)

    # ------------------------------------------------------------------- run
    def run(self) -> EngineResult:
        t0 = time.perf_counter()
        try:
            result = self._run()
        except OverflowError:
            # times are int64 picoseconds: an op of more than ~106 days (a bandwidth or a
            # slowdown off by orders of magnitude) cannot be represented
            raise EngineError(
                f"simulated time exceeds the engine's range ({MAX_SIMULATED_DAYS:.0f} days): "
                "an op would last longer; check the bandwidths, slowdowns and sizes"
            ) from None
        result.wall_time_s = time.perf_counter() - t0
        result.setup_time_s = self.setup_time_s
        return result

    def _setup(self) -> None:
        t0 = time.perf_counter()
        self.env = simpy.Environment()
        self.stats = NetworkStats()
        self.net = build_network(self.cost.network, self.env, self.cost.pricer, self.stats)
        self.pending: dict[tuple[object, ...], _Pending] = {}
        self.work: deque[tuple[_Rank, int]] = deque()
        self.instances_cache: dict[Hashable, tuple[Hashable, np.ndarray]] = {}
        self.launch_cache: dict[Hashable, tuple[Hashable, np.ndarray, str | None]] = {}
        self.group_gpus: dict[str, np.ndarray] = {}  # every instance of a group kind, as GPUs
        self.processed = 0
        self.skipped = 0
        self.next_report = 0
        compiled: dict[tuple[int, float, int], tuple[CompiledProgram, list[Region]]] = {}
        durations: dict[int, dict[object, int]] = {}  # per GPU type code
        mix = self.cost.gpu_mix
        keys: list[tuple[int, float, int]] = []
        for rep in self.view.reps.tolist():
            pidx = int(self.graph.rank_program[rep])
            factor = float(self.stragglers.get(rep, 1.0))
            code = 0 if mix is None else int(mix[self.placement[rep]])
            key = (pidx, factor, code)
            if key not in compiled:
                program = self.graph.programs[pidx]
                kernels, overlap, mech = self.cost.compute_of(code)
                interplay = self._interplay(rep, program, mech)
                cp = compile_program(
                    program,
                    kernels,
                    factor,
                    overlap,
                    durations.setdefault(code, {}),
                    self._comm_estimator(rep)
                    if _stretches(overlap) or interplay is not None
                    else None,
                    interplay,
                )
                compiled[key] = (cp, find_regions(program, cp))
            keys.append(key)
        parts = self._parts(list(compiled.values()))
        # ranks of one program share its unrolled lists, within a prover component (a
        # component skips its copies alone)
        unrolled: dict[tuple[int, float, int, int], Unrolled] = {}
        self.ranks: list[_Rank] = []
        for rep, key, part in zip(self.view.reps.tolist(), keys, parts, strict=True):
            prog = unrolled.get((*key, part))
            if prog is None:
                prog = Unrolled(*compiled[key])
                prog.work = self.work
                unrolled[(*key, part)] = prog
            n = prog.num_ops
            ns = len(prog.stream_names)
            r = _Rank(
                rank=rep,
                gpu=int(self.placement[rep]),
                prog=prog,
                start=array("q", [-1]) * n,
                end=array("q", [-1]) * n,
                pos=[0] * ns,
                free=[0] * ns,
                inflight=[-1] * ns,
                part=part,
            )
            prog.users.append(r)
            self.ranks.append(r)
        self.ops_total = sum(r.prog.program.represented_ops for r in self.ranks)
        self.parts = max(parts, default=0) + 1
        if self.parts > 1 and isinstance(self.net, ContentionNetwork):
            # components solved apart while their traffic keeps to their own links (with
            # or without skipping, so that both runs price alike)
            self.net.by_part = True
            self.net.private = private_links(self.topology, self.placement, self.view, parts)
        self.prover: Prover | None = None
        if self.steady_state and self.ranks:
            self.prover = Prover(self, self._watches(self.parts))
        self.setup_time_s = time.perf_counter() - t0

    def _parts(self, compiled: list[tuple[CompiledProgram, list[Region]]]) -> list[int]:
        """Per simulated rank, its prover component (simulator/engine/prover.py): all 0
        unless the view is refined (ranks differ, or the workload's classes did not fit)
        and some ranks meet in no collective inside a region (the full mode stays
        literal: the oracle the refined view is checked against)."""
        n = self.view.reps.size
        if not self.view.refined or n < 2:
            return [0] * n
        groups = {
            info.group
            for cp, regions in compiled
            for reg in regions
            for info in cp.comm[reg.start : reg.start + reg.length]
            if info is not None
        }
        return rank_components(self.view, groups)

    def _watches(self, parts: int) -> list[Watch]:
        """The prover's watches: the whole engine, or one per component."""
        if parts <= 1:
            return [Watch(self.ranks, whole=True)]
        members: list[list[_Rank]] = [[] for _ in range(parts)]
        for r in self.ranks:
            members[r.part].append(r)
        return [Watch(rs, whole=False, part=p) for p, rs in enumerate(members)]

    def _interplay(
        self, rank: int, program: Program, mech: InterferenceModel | None
    ) -> Interplay | None:
        """How `rank`'s communication and compute interact on its GPU (see
        simulator/cost/interference.py): the mechanism's stretch (`mech`, the rank's GPU
        type's; None where a fixed factor replaces it), and the communicator streams the
        hardware serialises with compute."""
        serial: frozenset[str] = frozenset()
        if self.cost.queues is not None:
            setup = stream_setup(self.graph.metadata)
            serial = self.cost.queues.serialised(comm_stream_order(program), setup)
            if serial:
                self.serialised[rank] = serial
        if mech is None:
            return Interplay(serial=serial) if serial else None
        return Interplay(self._comm_footprint(rank, mech), mech.stretch, serial)

    def _comm_footprint(self, rank: int, mech: InterferenceModel):
        """What each of `rank`'s communication ops occupies on its GPU (the mechanism's
        footprint of the slowest bundle, at its estimated isolated duration)."""
        estimate = self._comm_estimator(rank)
        bundles_of = self._comm_bundles(rank)
        pricer = self.cost.pricer
        cache: dict[tuple[object, ...], Footprint] = {}

        def load(info: CommInfo, kind: int) -> Footprint:
            ck = (
                info.group,
                info.kind,
                info.nbytes,
                info.root,
                info.algorithm,
                info.peer,
                info.sms,
            )
            got = cache.get(ck)
            if got is None:
                seconds = estimate(info, kind)
                bundles = bundles_of(info, kind)
                if not bundles:
                    got = NO_FOOTPRINT
                else:
                    b = max(
                        bundles, key=lambda x: pricer.estimate_time_s(x, info.nbytes, info.kind)
                    )
                    proto = pricer.plan(b, info.kind, info.nbytes, True).protocol
                    got = mech.footprint(
                        info.kind, info.nbytes, b.group_size, b.tier, proto, seconds, info.sms
                    )
                cache[ck] = got
            return got

        return load

    def _comm_bundles(self, rank: int):
        """The bundles pricing `rank`'s communication op, every instance of its group kind
        at once (as in a lockstep iteration), alike in both engine modes."""
        pricer = self.cost.pricer
        view = self.view

        def bundles(info: CommInfo, kind: int):
            recv = kind == RECV
            gv = view.groups[info.group]
            if info.peer >= 0:
                own = int(gv.position_of[rank])
                src, dst = (info.peer, own) if recv else (own, info.peer)
                rows = self.placement[gv.members[:, [src, dst]]]
                key: Hashable = (info.group, "all", src, dst)
            else:
                rows = self._group_gpus(info.group)
                key = (info.group, "all")
            return pricer.bundles(info.kind, rows, info.nbytes, info.root, info.algorithm, key)

        return bundles

    def _comm_estimator(self, rank: int):
        """Isolated duration estimates of `rank`'s communication ops (for overlap), cached
        by what they depend on (not the ordinal)."""
        pricer = self.cost.pricer
        bundles_of = self._comm_bundles(rank)
        cache = self._estimates.setdefault(rank, {})

        def estimate(info: CommInfo, kind: int) -> float:
            """`kind`: the op's compiled kind (a RECV moves bytes from the peer here)."""
            recv = kind == RECV
            ck = (info.group, info.kind, info.nbytes, info.root, info.algorithm, info.peer, recv)
            got = cache.get(ck)
            if got is not None:
                return got
            got = max(
                (pricer.estimate_time_s(b, info.nbytes, info.kind) for b in bundles_of(info, kind)),
                default=0.0,
            )
            cache[ck] = got
            return got

        return estimate

    def _run(self) -> EngineResult:
        self._setup()
        for r in self.ranks:
            for s in range(len(r.prog.stream_names)):
                self.work.append((r, s))
        self._drain()
        self.env.run()
        self._check_finished()
        return self._result()

    # ---------------------------------------------------------------- streams
    def _drain(self) -> None:
        work = self.work
        advance = self._advance
        popleft = work.popleft
        while work:
            advance(*popleft())
        if self.progress is not None and self.processed >= self.next_report:
            self.next_report = self.processed + 20000
            self.progress(self.processed, self.ops_total, self.env.now / PS_PER_S)

    def _advance(self, r: _Rank, s: int) -> None:
        prog = r.prog
        ops = prog.stream_ops[s]
        pos = r.pos[s]
        if pos < len(ops) and ops[pos] == r.inflight[s]:
            return
        kind, deps, dur, issue = prog.kind, prog.deps, prog.dur, prog.issue
        end, start = r.end, r.start
        free = r.free[s]
        ish = r.ish
        waiters = r.waiters
        first = pos  # ops of known duration done here: pos - first (pos moves only then)
        while True:
            n = len(ops)
            while pos < n:
                i = ops[pos]
                t = issue[i] + ish
                if free > t:
                    t = free
                for d in deps[i]:
                    e = end[d]
                    if e < 0:
                        break
                    if e > t:
                        t = e
                else:
                    if kind[i] <= WAIT:  # COMPUTE or WAIT: a known duration
                        start[i] = t
                        free = end[i] = t + dur[i]
                        pos += 1
                        if i in waiters:
                            for x in waiters.pop(i):  # a loop: no list to build
                                self.work.append((r, x))
                        continue
                    start[i] = t
                    r.inflight[s] = i
                    r.pos[s], r.free[s] = pos, free
                    self.processed += pos - first
                    self._arrive(r, i, s, t)
                    w = r.watch
                    if w is not None and w.run is not None:
                        self.prover.poll(w)  # type: ignore[union-attr]
                    return
                wait_for(waiters, d, s)  # blocked on op d, not done yet
                n = -1  # stop: blocked
                break
            if n < 0 or prog.complete:
                break
            r.pos[s], r.free[s] = pos, free
            parked = prog.parked.get(s)
            if parked is not None:
                # another rank of this program already waits for this stream's next ops
                # and nothing unrolled since gave it any: unrolling again now would build
                # copies ahead of every rank (in full mode one per rank, so every copy
                # before the periodic prover could skip any); wait with it instead
                parked.append(r)
                break
            if not prog.need(r, s):  # parked until ops for this stream are unrolled
                break
        r.pos[s], r.free[s] = pos, free
        self.processed += pos - first
        w = r.watch
        if w is not None and w.run is not None:
            self.prover.poll(w)  # type: ignore[union-attr]

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
        prog = r.prog
        info = prog.comm[i]
        assert info is not None
        got = r.groups.get(info.group)
        kc, expected, own = got if got is not None else self._group_keys(r, info.group)
        k = prog.kind[i]
        ordinal = info.ordinal
        if r.oshift:  # copies skipped before this op issued their collectives too
            ordinal += r.oshift.get(ordinal_key(info, k), 0)
        if k == COLL:
            key: tuple[object, ...] = (info.group, kc, ordinal)
        else:
            gv = self.view.groups[info.group]
            src, dst = (own, info.peer) if k == SEND else (info.peer, own)
            key = (info.group, kc, src, dst, ordinal)
            expected = (
                2
                if self.view.mode == "full"
                else len({self._class_at(gv, kc, src), self._class_at(gv, kc, dst)})
            )
        pending = self.pending
        p = pending.get(key)
        if p is None:
            p = pending[key] = _Pending()
        p.count += 1
        p.parts.append((r, i, s))
        if ready > p.ready:
            p.ready = ready
        if p.count == expected:
            del pending[key]
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
        # what the activation is priced by depends on the op and the instances, not on
        # the ordinal (key[-1]): resolved once per (instances, op)
        sk = (key[:-1], info.kind, info.nbytes, info.root, info.algorithm, info.peer)
        got = self.launch_cache.get(sk)
        if got is None:
            ikey, inst = self._instances(info.group, key)
            got = self.launch_cache[sk] = (ikey, inst, self._algorithm(info))
        ikey, inst, algorithm = got
        start = p.ready
        if start < self.env.now:
            raise EngineError("internal error: a collective would start in the simulated past")
        launch = _Launch(self, p.parts)
        act = Activation(
            kind=info.kind,
            nbytes=info.nbytes,
            instances=inst,
            key=ikey,
            on_done=launch,
            root=info.root,
            algorithm=algorithm,
            owner=launch,
        )
        launch.act = act
        if self.parts > 1:  # prover components: whose it is (-1: several's, outside regions)
            part = r.part
            act.part = part if all(x[0].part == part for x in p.parts) else -1
        self.net.submit(act, start)

    def _resolve(self, parts: list[tuple[_Rank, int, int]], start: int, end: int) -> None:
        work = self.work
        append = work.append
        for r, i, s in parts:
            r.end[i] = end
            r.sync[i] = start
            r.free[s] = end
            pos = r.pos[s] = r.pos[s] + 1
            r.inflight[s] = -1
            waiters = r.waiters
            if r.watch is not None or r.prog.kind[i] != COLL or not self._blocked(r, s, pos):
                append((r, s))
            if i in waiters:
                for x in waiters.pop(i):
                    append((r, x))
        self.processed += len(parts)
        self._drain()

    @staticmethod
    def _blocked(r: _Rank, s: int, pos: int) -> bool:
        """Whether stream s's next op waits on an op not done yet; if so, park the stream
        on it as `_advance` would (`_advance` would do nothing else: the caller then
        skips it). Only for a collective's participants, which are distinct ranks and
        none the watcher: what runs between here and that `_advance` changes nothing
        it reads of this rank."""
        ops = r.prog.stream_ops[s]
        if pos >= len(ops):
            return False
        end = r.end
        for d in r.prog.deps[ops[pos]]:
            if end[d] < 0:
                wait_for(r.waiters, d, s)
                return True
        return False

    # ------------------------------------------------------------ completion
    def _check_finished(self) -> None:
        if self.pending:
            key, p = next(iter(self.pending.items()))
            r, i, _ = p.parts[0]
            op = r.prog.program.ops[self._text_op(r, i)]
            raise EngineError(
                f"deadlock: collective '{op.name}' on group '{key[0]}' reached by {p.count} participant(s) of "
                f"{self._expected(key)} (rank {r.rank} waits); the others never issue it"
            )
        for r in self.ranks:
            ops = r.prog.stream_ops
            for s, pos in enumerate(r.pos):
                if pos < len(ops[s]):
                    i = ops[s][pos]
                    op = r.prog.program.ops[self._text_op(r, i)]
                    raise EngineError(
                        f"deadlock: rank {r.rank} cannot start op {i} ('{op.name}') on stream '{r.prog.stream_names[s]}'"
                    )
            if not r.prog.complete:
                raise EngineError(f"deadlock: rank {r.rank} stopped before the end of its program")

    @staticmethod
    def _text_op(r: _Rank, i: int) -> int:
        return i if r.prog.src is None else r.prog.src[i]

    def _expected(self, key: tuple[object, ...]) -> int:
        gv = self.view.groups[str(key[0])]
        return int(gv.expected[int(key[1])]) if len(key) == 3 else 2  # type: ignore[call-overload]

    # --------------------------------------------------------------- results
    def _records(self, r: _Rank, cache: dict[int, object]):
        """The rank's Timeline records: in text order where the text lists every op."""
        cols = program_columns(r.prog, cache)
        if r.prog.program.compressed:
            st = np.frombuffer(r.start, dtype=np.int64)
            en = np.frombuffer(r.end, dtype=np.int64)
            issue = record_issue(r.prog, r.warps)
            return rank_timeline(r.rank, cols, st, en, r.sync, issue)
        st, en, sync = text_times(r.prog, r.start, r.end, r.sync, r.warps)
        return rank_timeline(r.rank, cols, st, en, sync)

    def _result(self) -> EngineResult:
        end_ps = 0
        for r in self.ranks:
            e = max(r.end) if len(r.end) else 0
            end_ps = max(end_ps, e)
        cache: dict[int, object] = {}
        by_rank = {r.rank: r for r in self.ranks}
        # ranks whose records stand for skipped copies (Warp): the report adds them
        warps = {r.rank: list(r.warps) for r in self.ranks if r.warps and r.prog.program.compressed}

        def loader(rank: int):
            return self._records(by_rank[rank], cache)

        def end_of(rank: int) -> float | None:
            """The rank's latest record end as its records would give it (end_s is the
            end array in seconds where the text is compressed), without building them."""
            r = by_rank[rank]
            if not r.prog.program.compressed:
                return None
            en = np.frombuffer(r.end, dtype=np.int64).astype(np.float64) / PS_PER_S
            return float(en.max(initial=0.0))

        timeline = Timeline(
            ranks=tuple(sorted(by_rank)),
            world_size=self.graph.world_size,
            source="simulated",
            loader=loader,
            end_of=end_of,
            representative=self.view.representative,
            link_bytes=self.stats.link_bytes(self.topology.num_links),
            metadata={"mode": self.view.mode, "network": self.cost.network, "warps": warps},
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
            skipped_segments=self.skipped,
        )
