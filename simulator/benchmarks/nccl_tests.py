"""The table nccl-tests / rccl-tests print (`all_reduce_perf` and friends), written.

`axsim collective --format nccl-tests` prints a sweep in this shape so a simulated curve
can be put next to (or diffed against) a recorded log, and `axsim calibrate` reads the
same shape back (validation/calibration/benchmark_logs.py). Columns and number formats follow
nccl-tests src/common.cu: size (B), count (elements), type, redop, root, then time (us),
algbw and busbw (GB/s = 1e9 B/s) and #wrong, out-of-place and in-place (the simulator
prices both alike). The header names every rank and its node ("on nodeN"), which is
how a reader learns the group size and the node count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from workloads.ops import CollectiveKind

BINARIES = {
    CollectiveKind.ALL_REDUCE: "all_reduce_perf",
    CollectiveKind.ALL_GATHER: "all_gather_perf",
    CollectiveKind.REDUCE_SCATTER: "reduce_scatter_perf",
    CollectiveKind.ALL_TO_ALL: "alltoall_perf",
    CollectiveKind.BROADCAST: "broadcast_perf",
    CollectiveKind.REDUCE: "reduce_perf",
    CollectiveKind.SEND_RECV: "sendrecv_perf",
}
"""The nccl-tests binary of each collective (its name starts the log)."""
FLOAT_BYTES = 4  # nccl-tests' default datatype, float
REDUCING = (CollectiveKind.ALL_REDUCE, CollectiveKind.REDUCE_SCATTER, CollectiveKind.REDUCE)


class SweepRow(Protocol):
    """What a row needs: its size and simulated time."""

    bytes: int
    time_s: float
    algbw_GBps: float
    busbw_GBps: float


def nccl_time(us: float) -> str:
    """nccl-tests' time column: 0 decimals from 10 ms, 1 from 100 us, else 2."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def format_nccl_tests(
    kind: CollectiveKind,
    rows: Sequence[SweepRow],
    rank_nodes: Sequence[int],
    device: str,
    title: str = "",
) -> str:
    """The nccl-tests log of a simulated sweep (`rank_nodes[r]` = node of rank r)."""
    binary = BINARIES[kind]
    sizes = [r.bytes for r in rows]
    lines = [
        f"# Collective test starting: {binary}",
        f"# nThread 1 nGpus 1 minBytes {min(sizes)} maxBytes {max(sizes)} "
        "warmup iters: 0 iters: 1 agg iters: 1 validation: 0 graph: 0",
        f"# simulated by axsim{': ' + title if title else ''}",
        "#",
        "# Using devices",
    ]
    for rank, node in enumerate(rank_nodes):
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {0:6d} on {'node' + str(node):>10} device "
            f"{rank % max(1, _per_node(rank_nodes)):2d} [0x00] {device}"
        )
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        "#       size         count      type   redop    root     time   algbw   busbw "
        "#wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
        "            (us)  (GB/s)  (GB/s)",
    ]
    redop = "sum" if kind in REDUCING else "none"
    root = "0" if kind in (CollectiveKind.BROADCAST, CollectiveKind.REDUCE) else "-1"
    for r in rows:
        t = nccl_time(r.time_s * 1e6)
        half = f"{t} {r.algbw_GBps:7.2f} {r.busbw_GBps:7.2f} {0:6d}"
        lines.append(
            f"{r.bytes:12d} {r.bytes // FLOAT_BYTES:13d} {'float':>9} {redop:>7} {root:>7} "
            f"{half} {half}"
        )
    avg = sum(r.busbw_GBps for r in rows) / max(len(rows), 1)
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {avg:g}", "#"]
    return "\n".join(lines) + "\n"


def _per_node(rank_nodes: Sequence[int]) -> int:
    return max((list(rank_nodes).count(n) for n in set(rank_nodes)), default=1)
