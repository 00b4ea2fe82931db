"""Write the synthetic trace fixtures of eras and vendors that no copied trace covers.

Usage: python make_synthetic.py [OUT_DIR=here]

- pt18_2021_rank0.json: the PyTorch 1.8 / kineto 2021 format (cats Operator, Runtime,
  Kernel, Memcpy; string tids; "Input dims" and "external id" in lower case; async
  "launch" flows; no deviceProperties/distributedInfo), with a pre-2.9 NCCL kernel name.
- h100_2026_rank{0,1}.json: a 2-rank 2025-26 trace (traceEvents first, metadata keys
  after it; baseTimeNanoseconds; pg_config with two groups; record_param_comms and NCCL
  kernel comm args; ncclDevKernel_* names; cuLaunchKernelEx driver launches; a flash
  attention kernel; gpu_user_annotation steps whose GPU span outlasts the CPU span).
  Rank 1's clock reads RANK1_CLOCK_SKEW_US later than rank 0's.
- mi300x_rocm_rank0.json: ROCm (hip* runtime calls with `cid`, Cijk_* hipBLASLt and CK
  GEMMs, an RCCL kernel identified only by its comm args).
Times are µs; every value is chosen by hand, so tests can check exact results.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RANK1_CLOCK_SKEW_US = 37.0


class Trace:
    """A tiny builder for Kineto events on one CPU thread and one GPU stream."""

    def __init__(self, pid: Any, tid: Any, stream: int, legacy: bool = False) -> None:
        self.pid, self.tid, self.stream, self.legacy = pid, tid, stream, legacy
        self.events: list[dict[str, Any]] = []
        self.next_id = 1
        self.corr = 1000

    def cat(self, modern: str) -> str:
        legacy = {
            "cpu_op": "Operator",
            "user_annotation": "Operator",
            "cuda_runtime": "Runtime",
            "kernel": "Kernel",
            "gpu_memcpy": "Memcpy",
        }
        return legacy.get(modern, modern) if self.legacy else modern

    def op(self, name: str, ts: float, dur: float, cat: str = "cpu_op", **args: Any) -> int:
        ext = self.next_id
        self.next_id += 1
        if self.legacy and "Input Dims" in args:
            args["Input dims"] = args.pop("Input Dims")
        self.events.append(
            {
                "ph": "X",
                "cat": self.cat(cat),
                "name": name,
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "dur": dur,
                "args": {"External id": ext, **args},
            }
        )
        return ext

    def launch(
        self,
        ext: int,
        kernel: str,
        ts: float,
        start: float,
        dur: float,
        runtime: str = "cudaLaunchKernel",
        cat: str = "kernel",
        rt_cat: str = "cuda_runtime",
        kargs: dict[str, Any] | None = None,
    ) -> None:
        self.corr += 1
        ext_key = "external id" if self.legacy else "External id"
        rt_args: dict[str, Any] = {"correlation": self.corr, ext_key: ext}
        if runtime.startswith("hip"):
            rt_args["cid"] = 3
        elif not self.legacy:
            rt_args["cbid"] = 211
        self.events.append(
            {
                "ph": "X",
                "cat": self.cat(rt_cat),
                "name": runtime,
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "dur": 4,
                "args": rt_args,
            }
        )
        gpu_tid = f"stream {self.stream}" if self.legacy else self.stream
        args = {
            "queued": 0,
            "device": 0,
            "context": 1,
            "stream": self.stream,
            "correlation": self.corr,
            ext_key: ext,
            **(kargs or {}),
        }
        self.events.append(
            {
                "ph": "X",
                "cat": self.cat(cat),
                "name": kernel,
                "pid": 0,
                "tid": gpu_tid,
                "ts": start,
                "dur": dur,
                "args": args,
            }
        )
        flow = ("async", "launch") if self.legacy else ("ac2g", "ac2g")
        self.events.append(
            {
                "ph": "s",
                "id": self.corr,
                "pid": self.pid,
                "tid": self.tid,
                "ts": ts,
                "cat": flow[0],
                "name": flow[1],
            }
        )
        self.events.append(
            {
                "ph": "f",
                "id": self.corr,
                "pid": 0,
                "tid": gpu_tid,
                "ts": start,
                "cat": flow[0],
                "name": flow[1],
                "bp": "e",
            }
        )


def pt18() -> dict[str, Any]:
    t = Trace(4120, "4120", 7, legacy=True)
    base = 1616623035765000.0
    t.op("ProfilerStep#5", base, 2000)
    e = t.op(
        "aten::linear",
        base + 100,
        80,
        **{"Input Dims": [[32, 64], [128, 64], [128]], "Input type": ["float"] * 3},
    )
    e = t.op(
        "aten::addmm",
        base + 110,
        60,
        **{
            "Input Dims": [[128], [32, 64], [64, 128], [], []],
            "Input type": ["float"] * 3 + ["Scalar"] * 2,
        },
    )
    t.launch(e, "volta_sgemm_64x32_sliced1x4_tn", base + 120, base + 300, 12.0)
    t.launch(
        e,
        "void splitKreduce_kernel<float, float, float>(cublasSplitKParams<float>, float const*)",
        base + 140,
        base + 312,
        3.0,
    )
    e = t.op("aten::relu", base + 200, 20, **{"Input Dims": [[32, 128]], "Input type": ["float"]})
    t.launch(
        e,
        "void at::native::vectorized_elementwise_kernel<4, at::native::threshold_kernel_impl<float> >(int)",
        base + 205,
        base + 320,
        2.0,
    )
    e = t.op(
        "aten::copy_",
        base + 400,
        30,
        **{"Input Dims": [[1024], [1024], []], "Input type": ["float", "float", "Scalar"]},
    )
    t.launch(
        e,
        "Memcpy HtoD (Pageable -> Device)",
        base + 405,
        base + 420,
        3.0,
        runtime="cudaMemcpyAsync",
        cat="gpu_memcpy",
        kargs={"bytes": 4096},
    )
    e = t.op(
        "nccl:all_reduce",
        base + 600,
        40,
        cat="user_annotation",
        **{"Input Dims": [[262144]], "Input type": ["float"]},
    )
    t.launch(e, "ncclAllReduceRingLLKernel_sum_f32(ncclWorkElem)", base + 610, base + 650, 150.0)
    return {"schemaVersion": 1, "traceEvents": t.events}


def h100(rank: int) -> dict[str, Any]:
    skew = RANK1_CLOCK_SKEW_US * rank
    t = Trace(5000 + rank, 5000 + rank, 7)
    b = 7_000_000_000.0 + skew + 3.0 * rank  # rank 1 also issues everything 3 µs later
    t.op("ProfilerStep#3", b, 1000, cat="user_annotation")
    e = t.op(
        "aten::mm",
        b + 10,
        20,
        **{
            "Input Dims": [[4096, 1024], [1024, 2048]],
            "Input type": ["c10::BFloat16"] * 2,
            "Input Strides": [[1024, 1], [2048, 1]],
            "Concrete Inputs": ["", ""],
        },
    )
    t.launch(
        e,
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas",
        b + 15,
        b + 40,
        30.0,
        runtime="cuLaunchKernelEx",
        rt_cat="cuda_driver",
    )
    e = t.op(
        "aten::_scaled_dot_product_flash_attention",
        b + 40,
        20,
        **{"Input Dims": [[2, 16, 512, 64]] * 3, "Input type": ["c10::BFloat16"] * 3},
    )
    t.launch(
        e,
        "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128, 128, 4> >(Flash_fwd_params)",
        b + 45,
        b + 70,
        25.0,
    )
    comms = [
        (
            "_allgather_base",
            "c10d::_allgather_base_",
            "nccl:_all_gather_base",
            "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "BFloat16",
            1024,
            2048,
            "0",
            "default_pg",
            [[2048], [1024]],
        ),
        (
            "_reduce_scatter_base",
            "c10d::_reduce_scatter_base_",
            "nccl:_reduce_scatter_base",
            "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "BFloat16",
            4096,
            2048,
            "0",
            "default_pg",
            [[2048], [4096]],
        ),
        (
            "allreduce",
            "c10d::allreduce_",
            "nccl:all_reduce",
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
            "Float",
            1000,
            1000,
            "1",
            "tp",
            [[[1000]]],
        ),
        (
            "all_to_all",
            "c10d::alltoall_base_",
            "nccl:all_to_all",
            "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)",
            "Float",
            512,
            512,
            "1",
            "tp",
            [[512], [512]],
        ),
    ]
    for i, (coll, c10d, note, kernel, dtype, n_in, n_out, pg, desc, dims) in enumerate(comms):
        t0 = b + 100 + 150 * i
        meta = {
            "Collective name": coll,
            "In msg nelems": n_in,
            "Out msg nelems": n_out,
            "Group size": 2,
            "dtype": dtype,
            "In split size": "[]",
            "Out split size": "[]",
            "Process Group Name": pg,
            "Process Group Description": desc,
            "Process Group Ranks": "[0, 1]",
        }
        t.op(c10d, t0, 60, **{"Input Dims": dims, "Input type": ["float"] * len(dims)})
        e = t.op(
            "record_param_comms",
            t0 + 5,
            50,
            **meta,
            Rank=rank,
            **{"Global rank start": 0, "Global rank stride": 1},
        )
        t.op(note, t0 + 10, 30, cat="user_annotation")
        start = t0 + 30 + (20 if rank else 0)  # rank 0 arrives first and waits
        end = b - 3.0 * rank + 100 + 150 * i + 130  # all ranks finish together (true time)
        t.launch(e, kernel, t0 + 20, start, end - start, runtime="cudaLaunchKernelExC", kargs=meta)
    t.events.append(
        {
            "ph": "X",
            "cat": "gpu_user_annotation",
            "name": "ProfilerStep#3",
            "pid": 0,
            "tid": 7,
            "ts": b + 40,
            "dur": 1100,
            "args": {"External id": 1},
        }
    )
    return {
        "schemaVersion": 1,
        "traceEvents": t.events,
        "deviceProperties": [
            {
                "id": 0,
                "name": "NVIDIA H100 80GB HBM3",
                "totalGlobalMem": 85520809984,
                "computeMajor": 9,
                "computeMinor": 0,
                "numSms": 132,
            }
        ],
        "distributedInfo": {
            "backend": "nccl",
            "rank": rank,
            "world_size": 2,
            "pg_count": 2,
            "nccl_version": "2.21.5",
            "pg_config": [
                {
                    "pg_name": "0",
                    "pg_desc": "default_pg",
                    "backend_config": "cuda:nccl",
                    "pg_size": 2,
                    "ranks": [0, 1],
                },
                {
                    "pg_name": "1",
                    "pg_desc": "tp",
                    "backend_config": "cuda:nccl",
                    "pg_size": 2,
                    "ranks": [0, 1],
                },
            ],
        },
        "cuda_runtime_version": 12040,
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1767225600000000000,
    }


def mi300x() -> dict[str, Any]:
    t = Trace(700, 700, 0)
    b = 2_000_000.0
    t.op("ProfilerStep#1", b, 500, cat="user_annotation")
    e = t.op(
        "aten::addmm",
        b + 10,
        20,
        **{
            "Input Dims": [[2816], [8944, 1024], [1024, 2816], [], []],
            "Input type": ["c10::BFloat16"] * 3 + ["Scalar"] * 2,
        },
    )
    t.launch(
        e,
        "Cijk_Alik_Bljk_B_BS_BH_Bias_HA_S_SAV_UserArgs_MT256x128x64_MI16x16x1_SN_LDSB1_AFC1",
        b + 12,
        b + 30,
        40.0,
        runtime="hipExtModuleLaunchKernel",
        kargs={"kind": "Dispatch Kernel"},
    )
    e = t.op(
        "aten::mm",
        b + 40,
        20,
        **{"Input Dims": [[8944, 2816], [2816, 1024]], "Input type": ["c10::BFloat16"] * 2},
    )
    t.launch(
        e,
        "void ck::kernel_gemm_xdl_cshuffle_v3<ck::GridwiseGemm_xdl_cshuffle_v3<256, 128> >(ck::Argument)",
        b + 42,
        b + 75,
        45.0,
        runtime="hipLaunchKernel",
        kargs={"kind": "Dispatch Kernel"},
    )
    meta = {
        "Collective name": "allreduce",
        "In msg nelems": 1048576,
        "Out msg nelems": 1048576,
        "Group size": 8,
        "dtype": "BFloat16",
        "Process Group Name": "0",
        "Process Group Description": "default_pg",
        "Process Group Ranks": "[0, 1, 2, 3, 4, 5, 6, 7]",
    }
    e = t.op("record_param_comms", b + 100, 30, **meta)
    t.launch(
        e,
        "rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)",
        b + 105,
        b + 130,
        80.0,
        runtime="hipExtLaunchKernel",
        kargs={"kind": "Dispatch Kernel", **meta},
    )
    return {
        "schemaVersion": 1,
        "deviceProperties": [
            {"id": 0, "name": "AMD Instinct MI300X", "computeMajor": 9, "numSms": 304}
        ],
        "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 8},
        "hip_runtime_version": 60443483,
        "roctracer_version": 4.1,
        "traceEvents": t.events,
    }


def main(out: Path) -> None:
    files = {
        "pt18_2021_rank0.json": pt18(),
        "h100_2026_rank0.json": h100(0),
        "h100_2026_rank1.json": h100(1),
        "mi300x_rocm_rank0.json": mi300x(),
    }
    for name, trace in files.items():
        (out / name).write_text(json.dumps(trace, indent=1) + "\n", encoding="utf-8")
        print(name, len(trace["traceEvents"]), "events")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent)
