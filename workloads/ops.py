"""The op vocabulary of a per-rank training program.

Ops are immutable. Compute ops carry FLOPs and bytes, never a time: the simulator's cost
model turns them into durations. Communication ops carry the *logical* process group
(a group kind such as "x" or "data"; the rank's instance of it is resolved through
`ProcessGroups`), so one program object can be shared by every rank that runs it.

The vocabulary follows MLCommons Chakra (compute, collective, send, recv, control deps) so
exporting Chakra ET is an adapter, not a redesign.

Conventions
- `deps` are indices of earlier ops of the same program (data/control dependencies).
  Stream order is implicit: an op also waits for the previous op on its stream.
- Collective `bytes` is the full buffer S, as nccl-tests count it: the input of
  all-reduce, reduce-scatter and all-to-all, the output (= shard x group) of all-gather,
  the buffer of broadcast and reduce, what each member sends in a ring exchange.
- A collective's `tag` identifies it among the collectives of its group; all participants
  of one collective use the same tag. Ops on the same group are matched by tag and must
  appear in the same order on every member.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

COMPUTE_STREAM = "compute"
USERBUFFERS_STREAM_PREFIX = "comm:ub"
"""Streams of collectives launched from Transformer Engine's C++ userbuffers (tensor-
parallel overlap, workloads/hybrid/tp_overlap.py): no c10d work object, so the host
issues them at a kernel launch's cost (simulator/cost/kernels.py `issue_s`)."""


class ComputeKind(StrEnum):
    """What a compute kernel is; the kernel model prices each kind differently."""

    GEMM = "gemm"
    ATTENTION = "attention"
    ELEMENTWISE = "elementwise"
    OPTIMIZER = "optimizer"
    MEMCPY = "memcpy"
    QUANTIZE = "quantize"


class CollectiveKind(StrEnum):
    """Collective operations (nccl-tests naming with dashes)."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    SEND_RECV = "send-recv"  # a point-to-point transfer (internal: one send + one recv)
    # every member sends S bytes to the next member of the group and receives S from the
    # previous one, all at once (torch batch_isend_irecv on a ring: Transformer Engine's
    # context-parallel KV exchange); S is per member
    RING_EXCHANGE = "ring-exchange"


def bus_factor(kind: CollectiveKind, p: int) -> float:
    """nccl-tests' bus-bandwidth factor: bytes each GPU's busiest link carries per byte of
    the buffer in a bandwidth-optimal algorithm (all-reduce 2(p-1)/p; all-gather,
    reduce-scatter and all-to-all (p-1)/p, of the output / input / buffer)."""
    if p <= 1:
        return 1.0
    if kind is CollectiveKind.ALL_REDUCE:
        return 2.0 * (p - 1) / p
    if kind in (
        CollectiveKind.ALL_GATHER,
        CollectiveKind.REDUCE_SCATTER,
        CollectiveKind.ALL_TO_ALL,
    ):
        return (p - 1) / p
    return 1.0


@dataclass(frozen=True, slots=True)
class ComputeOp:
    """A kernel on the GPU. `shape` is (m, n, k[, batch]) for GEMMs, else ()."""

    name: str
    kind: ComputeKind
    flops: float
    bytes: float
    stream: str = COMPUTE_STREAM
    deps: tuple[int, ...] = ()
    shape: tuple[int, ...] = ()
    dtype_bytes: int = 2
    phase: str = ""  # "fwd", "bwd", "recompute", "opt", ... for reports
    # SMs (CUs) the kernel leaves to a concurrent communication kernel: a GEMM launched
    # with sm_count - sm_margin SMs (Transformer Engine's userbuffers set_sm_margin)
    sm_margin: int = 0


@dataclass(frozen=True, slots=True)
class CollectiveOp:
    """A collective over the rank's instance of process group kind `group`."""

    name: str
    kind: CollectiveKind
    group: str
    bytes: float
    tag: str
    stream: str
    deps: tuple[int, ...] = ()
    root: int = 0  # member position of the root (broadcast, reduce)
    algorithm: str | None = None  # force an algorithm; None = the config's selection
    phase: str = ""
    dtype_bytes: int = 2
    # SMs (CUs) the collective's kernels hold while it runs, where the software fixes them
    # (Transformer Engine's userbuffers: num_sm for pipeline / bulk kernels, 0 for copy-
    # engine transfers); None: the collective library's own launch rule (NCCL channels,
    # simulator/cost/interference.py)
    sms: int | None = None


@dataclass(frozen=True, slots=True)
class SendOp:
    """Send `bytes` to the member at position `peer` of the rank's `group` instance."""

    name: str
    group: str
    peer: int
    bytes: float
    tag: str
    stream: str
    deps: tuple[int, ...] = ()
    phase: str = ""


@dataclass(frozen=True, slots=True)
class RecvOp:
    """Receive `bytes` from the member at position `peer` of the rank's `group` instance."""

    name: str
    group: str
    peer: int
    bytes: float
    tag: str
    stream: str
    deps: tuple[int, ...] = ()
    phase: str = ""


@dataclass(frozen=True, slots=True)
class WaitOp:
    """`handle.wait()`: the op's stream cannot proceed until op `target` has finished.

    It takes no time itself; it is how a compute stream waits for an asynchronous
    collective issued earlier on a communicator's stream.
    """

    name: str
    target: int
    stream: str = COMPUTE_STREAM
    deps: tuple[int, ...] = ()
    phase: str = ""


Op = ComputeOp | CollectiveOp | SendOp | RecvOp | WaitOp
CommOp = CollectiveOp | SendOp | RecvOp


def op_dependencies(op: Op) -> tuple[int, ...]:
    """All explicit dependencies of an op, including a wait's target."""
    if isinstance(op, WaitOp):
        return (*op.deps, op.target)
    return op.deps


def is_comm(op: Op) -> bool:
    return isinstance(op, CollectiveOp | SendOp | RecvOp)
