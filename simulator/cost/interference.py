"""Compute/communication interference from its mechanism: what a running collective takes
from its GPU, what a kernel beside it loses, and which streams the hardware serialises.

Why a mechanism instead of one factor: NCCL and RCCL run a collective as a kernel with one
resident thread block per channel for the collective's whole duration, so a GEMM beside
it has that many fewer SMs/CUs (its waves re-quantise on the rest), and the collective's
data path streams through HBM, which memory-bound kernels share. How much a job loses
therefore depends on the library's channel count on that machine, the collective's size
(NCCL drops channels for small buffers) and the kernels it overlaps, not on the GPU alone.
On ROCm, HIP also multiplexes streams onto a few hardware queues whose kernels carry the
AQL barrier bit: a communicator whose stream lands on the compute stream's queue does not
overlap at all, it runs between the compute kernels. Every constant lives in
data/interference.yaml with its source.

The API other models reuse (Transformer Engine's comm overlap, issue 32, as well):
- `InterferenceModel.footprint(kind, nbytes, group_size, tier, protocol, seconds, sms)`:
  the `Footprint` (thread blocks, HBM bytes/s) a collective occupies on each member GPU
  (`sms`: the SMs the software fixes, e.g. Transformer Engine's userbuffers kernels);
- `InterferenceModel.stretch(op, footprints)`: how many times longer a compute op runs
  while those footprints are resident (>= 1); a GEMM launched with an SM margin
  (ComputeOp.sm_margin, simulator/cost/sm_share.py) loses nothing to blocks that fit in
  it, and a persistent GEMM (Hopper's cuBLAS) loses whole rounds of CTAs;
- `serialised_streams(...)`: the communicator streams that share the compute stream's
  hardware queue, from the runtime's queue assignment and the order the framework creates
  streams in (`StreamSetup`).
The collective itself is not slowed by a kernel beside it: its blocks are resident before
the next kernel's (NCCL/RCCL blocks persist), and its bandwidth is the link's, not the
SMs'; the one way compute delays it is a shared hardware queue (serialisation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any, Literal

from simulator.errors import CostModelError
from topologies.hardware import GpuSpec
from topologies.yaml_loader import load_packaged_yaml
from workloads.graph import Program
from workloads.ops import CollectiveKind, CollectiveOp, ComputeKind, ComputeOp, RecvOp, SendOp

DATA_FILE = "data/interference.yaml"
COMPUTE_BOUND = frozenset({ComputeKind.GEMM, ComputeKind.ATTENTION})
MAX_BUSY_SHARE = 0.95  # a kernel keeps at least 5% of the SMs / HBM (no infinite stretch)
POOL_STREAMS = 32  # PyTorch c10 kStreamsPerPool (streams per priority, round robin)


@dataclass(frozen=True, slots=True)
class Footprint:
    """What a running collective occupies on one member GPU: resident thread blocks
    (one per channel, each holding an SM/CU) and the HBM bandwidth of its data path."""

    blocks: int
    hbm_Bps: float


NO_FOOTPRINT = Footprint(0, 0.0)


@dataclass(frozen=True, slots=True)
class LibraryParams:
    """A collective library's launch rules (see data/interference.yaml for sources)."""

    name: str
    max_threads: dict[str, int]
    thread_threshold_bytes: dict[str, int]
    internal_streams: int
    hbm_bytes_per_received_byte: float
    ring_channels: dict[str, int]
    p2p_channels: dict[str, int]


@dataclass(frozen=True, slots=True)
class StreamSetup:
    """How the framework creates streams: PyTorch's pool made all 32 streams of a
    priority at its first use ("eager", PyTorch < 2.3) or each on its first use ("lazy",
    ROCm builds from PyTorch 2.3, pytorch/pytorch#119996); `before`: communicators that
    first communicate before the simulated iteration (the launcher's world barrier)."""

    pool: Literal["eager", "lazy"] = "eager"
    before: tuple[str, ...] = ("world",)


@cache
def _raw() -> dict[str, Any]:
    text = resources.files("simulator.cost").joinpath(DATA_FILE).read_text()
    data = load_packaged_yaml(text)
    if not isinstance(data, dict):
        raise CostModelError(f"{DATA_FILE}: expected a mapping")
    return data


def library_for(vendor: str, machine: str | None = None) -> LibraryParams:
    """The collective library of a vendor (NCCL for NVIDIA, RCCL for AMD), with a machine
    preset's own ring channels where data/interference.yaml has them."""
    raw = _raw()
    mach = (raw.get("machines") or {}).get(machine or "", {})
    name = mach.get("library") or ("rccl" if vendor == "amd" else "nccl")
    lib = raw["libraries"][name]
    channels = dict(lib["ring_channels"])
    channels.update(mach.get("ring_channels") or {})
    return LibraryParams(
        name=name,
        max_threads={k: int(v) for k, v in lib["max_threads"].items()},
        thread_threshold_bytes={k: int(v) for k, v in lib["thread_threshold_bytes"].items()},
        internal_streams=int(lib["internal_streams"]),
        hbm_bytes_per_received_byte=float(lib["hbm_bytes_per_received_byte"]),
        ring_channels={k: int(v) for k, v in channels.items()},
        p2p_channels={k: int(v) for k, v in (lib.get("p2p_channels") or channels).items()},
    )


def copy_engine_hbm_bytes() -> float:
    """HBM bytes per received byte of a copy-engine transfer (data/interference.yaml)."""
    return float(_raw().get("copy_engine_hbm_bytes_per_received_byte", 2.0))


def hw_queues(vendor: str) -> int | None:
    """Hardware queues per priority that streams are multiplexed onto (None: streams of
    this vendor's runtime never serialise through a shared queue)."""
    q = (_raw().get("queues") or {}).get(vendor, {}).get("hw_queues_per_priority")
    return None if q is None else int(q)


def launched_channels(lib: LibraryParams, channels: int, protocol: str, nbytes: float) -> int:
    """Blocks NCCL/RCCL launch for a collective of `nbytes` per rank (NCCL's nBytes):
    it drops a channel while nBytes < channels x threads x threshold (enqueue.cc)."""
    nt = lib.max_threads.get(protocol, max(lib.max_threads.values()))
    thr = lib.thread_threshold_bytes.get(protocol, 64)
    nc = max(1, channels)
    while nc > 1 and nbytes < nc * nt * thr:
        nc -= 1
    return nc


def nccl_nbytes(kind: CollectiveKind, buffer_bytes: float, group_size: int) -> float:
    """NCCL's nBytes (count x element size) for a collective given axsim's buffer bytes
    (all-gather output, reduce-scatter input, all-reduce buffer)."""
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return buffer_bytes / max(group_size, 1)
    return buffer_bytes


def received_bytes(kind: CollectiveKind, buffer_bytes: float, group_size: int) -> float:
    """Bytes one member receives over a ring collective (the nccl-tests bus bytes)."""
    p = max(group_size, 1)
    if p == 1:
        return 0.0
    if kind is CollectiveKind.ALL_REDUCE:
        return 2.0 * (p - 1) / p * buffer_bytes
    if kind in (CollectiveKind.ALL_GATHER, CollectiveKind.REDUCE_SCATTER):
        return (p - 1) / p * buffer_bytes
    return buffer_bytes


GemmEfficiency = Callable[[int, int, int, int, int], float]
"""efficiency(m, n, k, batch, sm_count) of the kernel model's GEMM curve."""

GemmTiles = Callable[[int, int, int, int], int]
"""tiles(m, n, k, batch): output tiles of the tile the kernel model's curve picks."""

GemmLaunch = Literal["tiles", "persistent"]


def gemm_launch(gpu: str) -> GemmLaunch:
    """How the GPU's GEMM library launches a large GEMM (data/interference.yaml
    `gemm_launch`): one block per output tile in waves, or a persistent grid."""
    got = (_raw().get("gemm_launch") or {}).get(gpu, "tiles")
    if got not in ("tiles", "persistent"):
        raise CostModelError(f"{DATA_FILE}: gemm_launch.{gpu} must be tiles or persistent")
    return "persistent" if got == "persistent" else "tiles"


def persistent_rounds(tiles: int, sm_count: int, sms_left: int) -> float:
    """How many times longer a persistent GEMM (a grid of G = min(tiles, SMs) CTAs, each
    looping over its share of the tiles, one CTA per SM) runs when only `sms_left` SMs are
    free at its launch: the first `sms_left` CTAs run their whole share, the others start
    when they finish, ceil(G / left) rounds instead of ceil(G / SMs) = 1."""
    g = max(1, min(int(tiles), sm_count))
    left = max(1, min(sms_left, sm_count))
    return math.ceil(g / left) / math.ceil(g / sm_count)


@dataclass(frozen=True)
class InterferenceModel:
    """The mechanism for one GPU type in one machine (see the module docstring)."""

    gpu: GpuSpec
    library: LibraryParams
    hbm_Bps: float  # achievable HBM bandwidth (the kernel model's)
    gemm_efficiency: GemmEfficiency | None = None
    gemm_tiles: GemmTiles | None = None
    launch: GemmLaunch = "tiles"

    @classmethod
    def for_gpu(
        cls,
        gpu: GpuSpec,
        machine: str | None,
        hbm_Bps: float,
        gemm_efficiency: GemmEfficiency | None = None,
        gemm_tiles: GemmTiles | None = None,
    ) -> InterferenceModel:
        lib = library_for(gpu.vendor, machine)
        return cls(gpu, lib, hbm_Bps, gemm_efficiency, gemm_tiles, gemm_launch(gpu.name))

    def footprint(
        self,
        kind: CollectiveKind,
        buffer_bytes: float,
        group_size: int,
        tier: str,
        protocol: str,
        seconds: float,
        sms: int | None = None,
    ) -> Footprint:
        """What the collective occupies on each member GPU while it runs `seconds`.

        `sms`: the SMs its kernels hold where the software fixes them instead of the
        library's channel rule (Transformer Engine's userbuffers, CollectiveOp.sms); 0 is
        a copy-engine transfer, whose data path reads the source and writes the
        destination once (`copy_engine_hbm_bytes_per_received_byte`)."""
        p2p = kind is CollectiveKind.SEND_RECV
        if buffer_bytes <= 0 or (group_size <= 1 and not p2p):
            return NO_FOOTPRINT
        recv = received_bytes(kind, buffer_bytes, max(group_size, 2))
        per_byte = self.library.hbm_bytes_per_received_byte
        if sms is not None:
            blocks = max(0, int(sms))
            if blocks == 0:
                per_byte = copy_engine_hbm_bytes()
        else:
            tiers = self.library.p2p_channels if p2p else self.library.ring_channels
            channels = tiers.get(tier, max(tiers.values()))
            nbytes = nccl_nbytes(kind, buffer_bytes, group_size)
            blocks = launched_channels(self.library, channels, protocol, nbytes)
        hbm = per_byte * recv / seconds if seconds > 0 else 0.0
        return Footprint(blocks, hbm)

    def stretch(
        self, op: ComputeOp, footprints: Sequence[Footprint], alone_s: float | None = None
    ) -> float:
        """How many times longer `op` runs beside these resident collectives (>= 1).

        A compute-bound kernel (GEMM, attention) runs on the SMs the collectives leave: a
        shaped GEMM re-quantises its tile waves on them (the kernel model's curve with
        fewer SMs), others lose the SM share; and, as a roofline, it cannot stream its
        bytes faster than the HBM bandwidth the collectives' data paths leave (`alone_s`,
        its time alone, tells how close to that bound it already runs: small GEMMs beside
        bandwidth-heavy collectives are memory-bound). A memory-bound kernel loses the
        HBM share."""
        if not footprints:
            return 1.0
        hbm = sum(f.hbm_Bps for f in footprints)
        share = min(hbm / self.hbm_Bps, MAX_BUSY_SHARE) if self.hbm_Bps > 0 else 0.0
        if op.kind not in COMPUTE_BOUND:
            return 1.0 / (1.0 - share)
        sm = self._sm_stretch(op, sum(f.blocks for f in footprints))
        if alone_s and alone_s > 0 and op.bytes > 0 and share > 0:
            memory_bound_s = op.bytes / (self.hbm_Bps * (1.0 - share))
            return max(sm, memory_bound_s / alone_s)
        return sm

    def _sm_stretch(self, op: ComputeOp, blocks: int) -> float:
        """A compute-bound kernel on the SMs `blocks` resident blocks leave.

        A GEMM launched with an SM margin (Transformer Engine's set_sm_margin: cuBLASLt
        told to use N - margin SMs, simulator/cost/sm_share.py) already runs on N - margin
        SMs, priced by the kernel model: resident blocks that fit in the margin take
        nothing more from it, only those beyond it do. A persistent GEMM (`launch`) runs
        G = min(tiles, its SMs) CTAs: with fewer SMs free at its launch the CTAs left
        over start only when a whole share is done (`persistent_rounds`); a GEMM of one
        block per tile re-quantises its waves on the SMs left (the curve)."""
        margin = int(op.sm_margin) if op.kind is ComputeKind.GEMM else 0
        if blocks <= margin:
            return 1.0
        n = self.gpu.sm_count
        width = n - margin  # the SMs the kernel was launched to use
        floor = math.ceil(n * (1 - MAX_BUSY_SHARE))
        left = max(n - blocks, floor)
        shape = _gemm_shape(op) if op.kind is ComputeKind.GEMM else None
        if shape is not None and self.launch == "persistent" and self.gemm_tiles is not None:
            return persistent_rounds(self.gemm_tiles(*shape), width, left)
        if shape is not None and self.gemm_efficiency is not None:
            m, nn, k, b = shape
            full = width * self.gemm_efficiency(m, nn, k, b, width)
            part = left * self.gemm_efficiency(m, nn, k, b, left)
            return max(1.0, full / part) if part > 0 else 1.0 / (1 - MAX_BUSY_SHARE)
        return width / left

    def describe(self) -> dict[str, object]:
        """The mechanism's terms (for reports)."""
        return {
            "library": self.library.name,
            "ring_channels": dict(self.library.ring_channels),
            "sm_count": self.gpu.sm_count,
        }


def _gemm_shape(op: ComputeOp) -> tuple[int, int, int, int] | None:
    s = op.shape
    if not s or len(s) < 3:
        return None
    m, n, k = (int(v) for v in s[:3])
    b = int(s[3]) if len(s) > 3 else 1
    return m, n, k, b


# ------------------------------------------------------------------ hardware queues
def queue_assignment(
    communicators: Sequence[str], setup: StreamSetup, queues: int, internal_streams: int
) -> tuple[int, dict[str, int]]:
    """(the compute stream's queue, each communicator's queue) as HIP assigns them.

    Streams take queues in creation order: the null stream first, then, per communicator
    in the order it first communicates (`setup.before` first), its pool stream (all 32 of
    the pool at the first request when the pool is eager) and then the library's internal
    streams (created at ncclGroupEnd, after the pool stream). A new stream takes a fresh
    queue while fewer than `queues` exist, else the one with the fewest users (the first
    of equals), as HIP's Device::getQueueFromPool does."""
    users: list[int] = []

    def acquire() -> int:
        if len(users) < queues:
            users.append(1)
            return len(users) - 1
        i = min(range(len(users)), key=users.__getitem__)
        users[i] += 1
        return i

    compute = acquire()
    pool: list[int] = []
    out: dict[str, int] = {}
    for k, name in enumerate([*setup.before, *communicators]):
        idx = k % POOL_STREAMS
        if setup.pool == "eager":
            if not pool:
                pool = [acquire() for _ in range(POOL_STREAMS)]
            q = pool[idx]
        else:
            q = acquire() if k < POOL_STREAMS else pool[idx]
            if k < POOL_STREAMS:
                pool.append(q)
        out.setdefault(name, q)
        for _ in range(internal_streams):
            acquire()
    return compute, out


def serialised_streams(
    comm_streams: Sequence[tuple[str, str]],
    vendor: str,
    setup: StreamSetup,
    machine: str | None = None,
) -> frozenset[str]:
    """The stream names (of `(stream, communicator)` pairs in first-use order) whose
    hardware queue is the compute stream's, so that their collectives run between the
    compute kernels instead of beside them. Empty where streams do not serialise."""
    q = hw_queues(vendor)
    if q is None or not comm_streams:
        return frozenset()
    lib = library_for(vendor, machine)
    names = list(dict.fromkeys(c for _, c in comm_streams))
    compute, queue_of = queue_assignment(names, setup, q, lib.internal_streams)
    return frozenset(s for s, c in comm_streams if queue_of.get(c) == compute)


@dataclass(frozen=True)
class HardwareQueues:
    """The run's stream-to-queue runtime: the GPU vendor's (HIP or CUDA) and the machine
    (for its collective library's internal streams)."""

    vendor: str
    machine: str | None = None

    def serialised(
        self, comm_streams: Sequence[tuple[str, str]], setup: StreamSetup
    ) -> frozenset[str]:
        """See `serialised_streams`."""
        return serialised_streams(comm_streams, self.vendor, setup, self.machine)


def comm_stream_order(program: Program) -> list[tuple[str, str]]:
    """(stream, process group kind) of a program's communicators in the order each first
    communicates (the order their streams are created in)."""
    seen: dict[str, str] = {}
    for op in program.ops:
        if isinstance(op, CollectiveOp | SendOp | RecvOp) and op.stream not in seen:
            seen[op.stream] = op.group
    return list(seen.items())


def stream_setup(metadata: Mapping[str, object]) -> StreamSetup:
    """The framework's stream creation recorded in a workload's metadata (the strategy's
    code version sets it; default: PyTorch's eager pool after the world group's barrier)."""
    pool = metadata.get("stream_pool", "eager")
    before = metadata.get("communicators_before", ("world",))
    if pool not in ("eager", "lazy") or not isinstance(before, tuple | list):
        raise CostModelError(f"workload metadata: bad stream setup ({pool!r}, {before!r})")
    return StreamSetup(pool, tuple(str(b) for b in before))
