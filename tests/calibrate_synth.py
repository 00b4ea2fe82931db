"""Synthetic 2-rank H100 Kineto traces with known collective, GEMM and overlap costs.

The calibrator must recover what made them: a two-regime all-reduce (alpha 20 µs and
50 GB/s below 1 MiB, alpha 40 µs and 200 GB/s above), GEMMs at 500 TFLOP/s plus 5 µs,
and GEMMs stretched by 1.25 when they run under a collective. Rank 1 reaches every
collective LAG_US after rank 0, so rank 0's kernels last LAG_US longer (only the minimum
over ranks is the transfer). Format: PyTorch 2.4+ (comm metadata on record_param_comms
and on the NCCL kernels, External id linking, pg_config), in the shape real traces have.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SIZES = [4096 * 4**i for i in range(9)]  # 4 KiB .. 256 MiB
SHAPES = [(1024, 1024, 1024), (2048, 2048, 2048), (4096, 4096, 1024), (4096, 4096, 4096)]
GEMM_RATE = 500e12
GEMM_FIXED_S = 5e-6
SLOWDOWN = 1.25
LAG_US = 30.0
STEPS = 3
BREAK = 1 << 20


def allreduce_s(nbytes: float) -> float:
    """The true all-reduce time of the synthetic network."""
    if nbytes < BREAK:
        return 20e-6 + nbytes / 50e9
    return 40e-6 + nbytes / 200e9


def gemm_s(m: int, n: int, k: int) -> float:
    """The true GEMM kernel time."""
    return GEMM_FIXED_S + 2.0 * m * n * k / GEMM_RATE


class _Rank:
    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.events: list[dict[str, Any]] = []
        self.ext = 1
        self.corr = 1

    def cpu(self, name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> int:
        ext = self.ext
        self.ext += 1
        args["External id"] = ext
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 100 + self.rank,
                            "tid": 1, "ts": ts, "dur": dur, "args": args})  # fmt: skip
        return ext

    def kernel(self, name: str, ts: float, dur: float, ext: int, stream: int, **args: Any) -> None:
        corr = self.corr
        self.corr += 1
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel",
                            "pid": 100 + self.rank, "tid": 1, "ts": ts - 2.0, "dur": 1.0,
                            "args": {"correlation": corr, "External id": ext}})  # fmt: skip
        self.events.append({"ph": "X", "cat": "kernel", "name": name, "pid": self.rank,
                            "tid": stream, "ts": ts, "dur": dur,
                            "args": {"device": self.rank, "stream": stream, "correlation": corr,
                                     "External id": ext, **args}})  # fmt: skip

    def gemm(self, m: int, n: int, k: int, ts: float, slow: float = 1.0) -> float:
        dur = gemm_s(m, n, k) * 1e6 * slow
        ext = self.cpu("aten::mm", ts - 3.0, 2.5, **{"Input Dims": [[m, k], [k, n]],
                       "Input type": ["c10::BFloat16", "c10::BFloat16"]})  # fmt: skip
        self.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", ts, dur, ext, 7)
        return ts + dur

    def allreduce(self, nbytes: int, start: float, end: float) -> None:
        meta = {"Collective name": "allreduce", "dtype": "BFloat16",
                "In msg nelems": nbytes // 2, "Out msg nelems": nbytes // 2, "Group size": 2,
                "Process Group Name": "0", "Process Group Description": "default_pg",
                "Process Group Ranks": "[0, 1]"}  # fmt: skip
        ext = self.cpu("record_param_comms", start - 3.0, 2.5, **meta)
        self.kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                    start, end - start, ext, 20, **meta)  # fmt: skip


def _step(r: _Rank, t: float) -> float:
    for m, n, k in SHAPES:  # clean GEMMs
        t = r.gemm(m, n, k, t) + 2.0
    for nbytes in SIZES:  # the collective sweep: rank 1 arrives LAG_US later
        arrive_last = t + LAG_US
        end = arrive_last + allreduce_s(nbytes) * 1e6
        r.allreduce(nbytes, t if r.rank == 0 else arrive_last, end)
        t = end + 5.0
    big = 1 << 28  # GEMMs under a long all-reduce: stretched by SLOWDOWN
    end = t + LAG_US + allreduce_s(big) * 1e6
    r.allreduce(big, t if r.rank == 0 else t + LAG_US, end)
    g = t + LAG_US + 1.0
    for m, n, k in SHAPES:
        g = r.gemm(m, n, k, g, SLOWDOWN) + 1.0
    return end + 10.0


def rank_trace(rank: int) -> dict[str, Any]:
    """One rank's trace document."""
    r = _Rank(rank)
    t = 100.0
    for step in range(1, STEPS + 1):
        begin = t
        t = _step(r, t + 5.0)
        r.cpu(f"ProfilerStep#{step}", begin, t - begin, cat="user_annotation")
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": d, "name": "NVIDIA H100 80GB HBM3", "numSms": 132} for d in (0, 1)
        ],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2,
                            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg",
                                           "pg_size": 2, "ranks": [0, 1]}]},
        "baseTimeNanoseconds": 1_800_000_000_000_000_000,
        "traceEvents": r.events,
    }  # fmt: skip


def write_run(folder: Path) -> list[Path]:
    """Write rank0.json and rank1.json into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in (0, 1):
        p = folder / f"rank{rank}.json"
        p.write_text(json.dumps(rank_trace(rank)))
        paths.append(p)
    return paths
