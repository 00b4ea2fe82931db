"""Accelerator specifications (the GPU catalogue), loaded from `data/gpus.yaml`.

Why a data file: adding a GPU is a YAML edit, and `axsim schema`/docs can list the
catalogue without importing code. Units: FLOP/s, bytes, bytes/s (SI), converted from the
human units in the YAML field names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

from topologies.errors import TopologyError
from topologies.yaml_loader import load_packaged_yaml


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
    device_names: tuple[str, ...] = field(default=())
    silicon: str = ""
    fp8_peak_flops: float | None = None  # dense FP8 tensor-core peak; None: no FP8

    @property
    def has_fp8(self) -> bool:
        """FP8 tensor cores (Transformer Engine's FP8 training runs here)."""
        return self.fp8_peak_flops is not None

    @property
    def peak_tflops(self) -> float:
        return self.peak_flops / 1e12


@cache
def gpu_catalogue() -> dict[str, GpuSpec]:
    """All known GPUs by name."""
    text = resources.files("topologies").joinpath("data/gpus.yaml").read_text()
    raw = load_packaged_yaml(text)
    out: dict[str, GpuSpec] = {}
    for name, d in raw.items():
        emp = d.get("empirical_gemm_tflops")
        fp8 = d.get("fp8_peak_tflops")
        out[name] = GpuSpec(
            name=name,
            display_name=str(d["display_name"]),
            vendor=str(d["vendor"]),
            peak_flops=float(d["peak_tflops"]) * 1e12,
            # the capacity a job can fill: the device's measured totalGlobalMem where a
            # trace shows it (the "80 GB" A100 has 84.99e9 bytes); the memory models
            # count the caching allocator's fragmentation and the runtime's reserve
            # themselves (workloads/memory.py), so no headroom hides here
            memory_bytes=float(d.get("memory_total_bytes") or float(d["memory_GB"]) * 1e9),
            hbm_bandwidth_Bps=float(d["hbm_bandwidth_GBps"]) * 1e9,
            empirical_gemm_flops=None if emp is None else float(emp) * 1e12,
            sm_count=int(d["sm_count"]),
            device_names=tuple(str(p) for p in d.get("device_names") or ()),
            silicon=str(d.get("silicon") or name),
            fp8_peak_flops=None if fp8 is None else float(fp8) * 1e12,
        )
    return out


def gpu_spec(name: str) -> GpuSpec:
    """The spec of a GPU by catalogue name; raises TopologyError naming the known ones."""
    cat = gpu_catalogue()
    key = name.strip().lower()
    if key not in cat:
        raise TopologyError(f"unknown GPU '{name}' (known: {', '.join(sorted(cat))})")
    return cat[key]


MEMORY_MATCH = 0.10
"""Relative tolerance between a device's totalGlobalMem and a catalogue capacity (its
measured totalGlobalMem, or memory_GB x 10^9, which sits up to 7% below the bytes a
device of that marketed size reports: 80 GB A100: 84.99e9; MI300X: 205.6e9)."""


def _memory_matches(spec: GpuSpec, memory_bytes: float) -> bool:
    return abs(memory_bytes - spec.memory_bytes) <= MEMORY_MATCH * spec.memory_bytes


def _by_name(device_name: str, specs: list[GpuSpec]) -> GpuSpec | None:
    """The entry whose device_names pattern matches the most characters (GH200 over H200)."""
    best: tuple[int, GpuSpec] | None = None
    for spec in specs:
        for pattern in spec.device_names:
            m = re.search(pattern, device_name, re.IGNORECASE)
            if m and (best is None or len(m.group(0)) > best[0]):
                best = (len(m.group(0)), spec)
    return best[1] if best else None


def identify_gpu(
    device_name: str,
    vendor: str,
    sm_count: int | None = None,
    memory_bytes: float | None = None,
) -> str | None:
    """The catalogue key of a profiled device, or None when it cannot be told apart.

    The name decides when a `device_names` pattern matches it; the properties (SM/CU count
    and memory, as a trace's deviceProperties give them) then only move it to the sibling
    entry of the same silicon whose memory matches (Meta's "A100-PG509-200" is the 40 GB
    part). A generic name ("AMD Radeon Graphics", as ROCm reports MI250 GCDs) is resolved
    from the properties alone: the one entry of that vendor with this SM count and memory.
    """
    named = _by_name(device_name, list(gpu_catalogue().values())) if device_name else None
    specs = [s for s in gpu_catalogue().values() if s.vendor == vendor]
    if sm_count is None or memory_bytes is None or memory_bytes <= 0:
        return named.name if named else None
    same = [s for s in specs if s.sm_count == int(sm_count) and _memory_matches(s, memory_bytes)]
    if named is not None:
        if named.sm_count != int(sm_count) or _memory_matches(named, memory_bytes):
            return named.name
        return same[0].name if len(same) == 1 else named.name
    return same[0].name if len(same) == 1 else None
