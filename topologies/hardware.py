"""Accelerator specifications (the GPU catalogue), loaded from `data/gpus.yaml`.

Why a data file: adding a GPU is a YAML edit, and `axsim schema`/docs can list the
catalogue without importing code. Units: FLOP/s, bytes, bytes/s (SI), converted from the
human units in the YAML field names.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from topologies.errors import TopologyError


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """Peak rates and capacity of one accelerator (one GCD for MI250X)."""

    name: str
    display_name: str
    vendor: str
    peak_flops: float
    memory_bytes: float
    hbm_bandwidth_Bps: float
    empirical_gemm_flops: float | None
    sm_count: int

    @property
    def peak_tflops(self) -> float:
        return self.peak_flops / 1e12


@cache
def gpu_catalogue() -> dict[str, GpuSpec]:
    """All known GPUs by name."""
    text = resources.files("topologies").joinpath("data/gpus.yaml").read_text()
    raw = yaml.safe_load(text)
    out: dict[str, GpuSpec] = {}
    for name, d in raw.items():
        emp = d.get("empirical_gemm_tflops")
        out[name] = GpuSpec(
            name=name,
            display_name=str(d["display_name"]),
            vendor=str(d["vendor"]),
            peak_flops=float(d["peak_tflops"]) * 1e12,
            # the capacity a job can fill: HBM is sold in binary units (the "40 GB" A100
            # has 40 GiB), but PyTorch's caching allocator fragments; counting 10^9 bytes
            # per GB keeps that ~7% headroom on top of the memory model's runtime reserve
            # (with 2^30 the largest-fitting microbatch of GPT-5B on 512 A100s filled
            # 39.3 of 40 GiB, which a real run would not survive)
            memory_bytes=float(d["memory_GB"]) * 1e9,
            hbm_bandwidth_Bps=float(d["hbm_bandwidth_GBps"]) * 1e9,
            empirical_gemm_flops=None if emp is None else float(emp) * 1e12,
            sm_count=int(d["sm_count"]),
        )
    return out


def gpu_spec(name: str) -> GpuSpec:
    """The spec of a GPU by catalogue name; raises TopologyError naming the known ones."""
    cat = gpu_catalogue()
    key = name.strip().lower()
    if key not in cat:
        raise TopologyError(f"unknown GPU '{name}' (known: {', '.join(sorted(cat))})")
    return cat[key]
