"""What the trace exporters need to know about a simulated run beyond its Timeline.

A RankTimeline holds one record per program op (in issue order), with the group *kind*
of communication. Traces need more: the group *instance* and its ranks, the collective's
sequence number on that instance (how the engine matches collectives), the peer of a
send or receive, the element type, and when the host issued each op (its CPU launch).
`TraceContext.rank_info(rank)` joins a rank's records with its program op by op.

Host issue times are recomputed exactly as the engine computes them
(simulator/engine/compiled.py: cumulative `KernelModel.issue_s` in integer picoseconds,
waits cost nothing), so every kernel starts at or after its launch.

In symmetric mode only class representatives have records; `classes()` says which ranks
each representative stands for, so exports write one file per class, not copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from simulator.engine.timeline import COMM_KINDS, RankTimeline
from simulator.errors import ConfigError
from simulator.outputs.trace_names import (
    COLLECTIVE_NAMES,
    KINETO_DTYPES,
    GroupRegistry,
    message_nelems,
)
from workloads.graph import Program
from workloads.ops import CollectiveOp, RecvOp, SendOp, WaitOp

if TYPE_CHECKING:
    from simulator.cost.kernels import KernelModel
    from simulator.outputs.finished import FinishedRun

PS_PER_S = 10**12


@dataclass(frozen=True)
class RankInfo:
    """Per-record trace facts of one rank (arrays aligned with its RankTimeline)."""

    timeline: RankTimeline
    issue_s: np.ndarray  # when the host finished dispatching each op
    pg_name: list[str]  # "" for compute and waits
    seq: np.ndarray  # collective: its index among this rank's ops on the group; p2p: per peer
    peer: np.ndarray  # send/recv: the global rank at the other end, else -1
    is_send: np.ndarray
    dtype_bytes: np.ndarray
    wait_target: np.ndarray  # wait: the record it waits for, else -1
    algorithm: list[str | None]


@dataclass
class TraceContext:
    """A finished simulation seen by the trace exporters."""

    result: FinishedRun
    registry: GroupRegistry
    _issue_cache: dict[int, np.ndarray] = field(default_factory=dict)

    @classmethod
    def from_result(cls, result: FinishedRun) -> TraceContext:
        return cls(result, GroupRegistry.build(result.plan.graph.groups))

    @property
    def world_size(self) -> int:
        return int(self.result.engine.timeline.world_size)

    @property
    def gpus_per_node(self) -> int:
        return int(self.result.topology.gpus_per_node) or 1

    def classes(self, ranks: list[int]) -> dict[int, np.ndarray]:
        """Representative -> every rank it stands for, for the representatives of `ranks`
        (full mode: each rank stands for itself)."""
        rep = self.result.engine.timeline.representative
        if rep is None:
            return {r: np.array([r]) for r in ranks}
        reps = sorted({int(rep[r]) for r in ranks})
        return {r: np.flatnonzero(rep == r) for r in reps}

    def issue_s(self, program: Program) -> np.ndarray:
        """Host dispatch end of every op of `program` (as the engine computes it)."""
        cached = self._issue_cache.get(id(program))
        if cached is not None:
            return cached
        kernels = self._kernel_model()
        cpu = 0
        out = np.zeros(len(program.ops), dtype=np.float64)
        for i, op in enumerate(program.ops):
            if not isinstance(op, WaitOp):
                cpu += round(kernels.issue_s(op) * PS_PER_S)
            out[i] = cpu / PS_PER_S
        self._issue_cache[id(program)] = out
        return out

    def _kernel_model(self) -> KernelModel:
        from simulator.cost.kernels import KernelModel
        from topologies.hardware import gpu_spec

        cfg = self.result.config
        calibration = None
        if cfg.engine.calibration:
            from simulator.cost.calibration import load_calibration

            calibration = load_calibration(cfg.engine.calibration)
        return KernelModel(
            gpu_spec(cfg.cluster.gpu or self.result.topology.gpu_type),
            calibration=calibration,
            attention_kernel=cfg.training.attention_kernel,
        )

    def rank_info(self, rank: int) -> RankInfo:
        """The records of `rank` joined with its program (see module doc)."""
        tl = self.result.engine.timeline.rank(rank)
        program = self.result.plan.graph.program_of(rank)
        ops = program.ops
        if len(ops) != len(tl) or (ops and ops[-1].name != str(tl.name[-1])):
            raise ConfigError(
                f"trace export: rank {rank}'s timeline ({len(tl)} records) does not match "
                f"its program ({len(ops)} ops); simulate with engine.virtual_microbatches=false"
            )
        n = len(ops)
        pg = [""] * n
        seq = np.full(n, -1, dtype=np.int64)
        peer = np.full(n, -1, dtype=np.int64)
        is_send = np.zeros(n, dtype=bool)
        dtype = np.full(n, 2, dtype=np.int64)
        target = np.full(n, -1, dtype=np.int64)
        algo: list[str | None] = [None] * n
        default_algo = self.result.config.engine.collective_algorithm
        counters: dict[object, int] = {}
        reg = self.registry
        for i, op in enumerate(ops):
            if isinstance(op, WaitOp):
                target[i] = op.target
                continue
            if isinstance(op, CollectiveOp):
                pg[i] = reg.pg_name(op.group, rank)
                key: object = op.group
                dtype[i] = op.dtype_bytes
                algo[i] = op.algorithm or (None if default_algo == "auto" else default_algo)
            elif isinstance(op, SendOp | RecvOp):
                pg[i] = reg.pg_name(op.group, rank)
                other = int(reg.members(op.group, rank)[op.peer])
                peer[i] = other
                is_send[i] = isinstance(op, SendOp)
                key = (op.group, is_send[i], op.peer)
            else:
                continue
            seq[i] = counters.get(key, 0)
            counters[key] = seq[i] + 1
        return RankInfo(tl, self.issue_s(program), pg, seq, peer, is_send, dtype, target, algo)


def comm_args(ctx: TraceContext, info: RankInfo, i: int) -> dict[str, object]:
    """The comm metadata PyTorch attaches to an NCCL kernel and to record_param_comms."""
    tl = info.timeline
    kind = str(tl.kind[i])
    group = str(tl.group[i])
    members = ctx.registry.members(group, tl.rank)
    size = int(members.size)
    dtype = int(info.dtype_bytes[i])
    n_in, n_out = message_nelems(kind, float(tl.bytes[i]), size, dtype)
    name = COLLECTIVE_NAMES[kind]
    if kind == "send-recv" and not info.is_send[i]:
        name = "recv"
    return {
        "Collective name": name,
        "In msg nelems": n_in,
        "Out msg nelems": n_out,
        "Group size": size,
        "dtype": KINETO_DTYPES.get(dtype, "BFloat16"),
        "In split size": "[]",
        "Out split size": "[]",
        "Process Group Name": info.pg_name[i],
        "Process Group Description": ctx.registry.pg_desc(group, tl.rank),
        "Process Group Ranks": ctx.registry.ranks_text(group, tl.rank),
        "Seq": int(info.seq[i]),
    }


def is_comm_kind(kind: str) -> bool:
    return kind in COMM_KINDS
