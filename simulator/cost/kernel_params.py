"""Kernel-model constants per GPU, loaded from `data/kernel_defaults.yaml`.

Why a data file: the constants are fitted to traces and will be re-fitted; keeping them
out of code makes a re-fit a YAML edit with its provenance next to the numbers. A GPU's
parameters are its vendor's defaults deep-merged with the GPU's own overrides. Units are
converted to SI here (µs -> s), so the kernel model only sees SI.
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from simulator.errors import CostModelError
from topologies.hardware import GpuSpec, gpu_catalogue
from topologies.user_files import read_user_text
from topologies.yaml_loader import load_packaged_yaml

DEFAULTS_FILE = "data/kernel_defaults.yaml"


@dataclass(frozen=True, slots=True)
class KernelParams:
    """The constants of the kernel model for one GPU (SI units).

    `gemm_peak_fraction` is the resolved fraction of the advertised peak that a large
    GEMM sustains (the one rule of `resolve_gemm_peak`; `gemm_peak_rule` says which
    branch and source gave it). `tiles` are the candidate GEMM output tiles (rows, cols)
    the model chooses among, as cuBLAS and hipBLASLt heuristics roughly do;
    `tile_intensity_knee` sets how much less efficient a small tile is than the largest
    one (see gemm.py). `interference_compute` / `interference_memory`, where a defaults
    file or a transfer fixes them, stretch the part of a compute-bound (GEMM, attention)
    / memory-bound kernel that runs beside a collective; None (the GPU presets): the
    mechanism of simulator/cost/interference.py prices it instead.
    """

    gemm_peak_fraction: float
    hbm_efficiency: float
    launch_overhead_s: float
    min_kernel_s: float
    vector_peak_fraction: float
    interference_compute: float | None
    interference_memory: float | None
    cpu_issue_compute_s: float
    cpu_issue_collective_s: float
    dtype_peak_scale: Mapping[int, float]
    gemm_fixed_s: float
    gemm_k_ramp: float
    gemm_tile_intensity_knee: float
    gemm_tiles: tuple[tuple[int, int], ...]
    attention_fwd_fraction: float
    attention_bwd_fraction: float
    sustained_clock_fraction: float = 1.0
    attention_fa1_ratio: float = 1.0
    gemm_peak_rule: str = ""
    gemm_split_k: tuple[int, ...] = (1,)

    @property
    def overlap_slowdown(self) -> float | None:
        """The compute-bound interference factor (the single factor of older versions);
        None where the mechanism prices interference."""
        return self.interference_compute


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge `over` into a copy of `base` (mappings merge, other values replace)."""
    out = deepcopy(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = deepcopy(value)
    return out


@cache
def raw_defaults(path: str | None) -> dict[str, Any]:
    """The parsed defaults file (the packaged one when `path` is None)."""
    if path is None:
        text = resources.files("simulator.cost").joinpath(DEFAULTS_FILE).read_text()
        where = f"simulator/cost/{DEFAULTS_FILE}"
    else:
        where = path
        try:
            text = read_user_text(path)
        except OSError as exc:
            raise CostModelError(f"kernel defaults {path}: cannot read ({exc.strerror})") from exc
        except UnicodeDecodeError:
            raise CostModelError(f"kernel defaults {path}: not a text file (not UTF-8)") from None
    try:
        raw = yaml.safe_load(text) if path is not None else load_packaged_yaml(text)
    except yaml.YAMLError as exc:
        raise CostModelError(f"kernel defaults {where}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("vendors"), dict):
        raise CostModelError(f"kernel defaults {where}: field 'vendors' is missing")
    raw["_where"] = where
    return raw


def _positive(d: Mapping[str, Any], key: str, where: str, *, allow_zero: bool = False) -> float:
    """Read `key` as a float > 0 (>= 0 with allow_zero), naming the field on error."""
    try:
        value = float(d[key])
    except KeyError as exc:
        raise CostModelError(f"kernel defaults {where}: field '{key}' is missing") from exc
    except (TypeError, ValueError) as exc:
        raise CostModelError(f"kernel defaults {where}: field '{key}' is not a number") from exc
    if value < 0 or (value == 0 and not allow_zero):
        raise CostModelError(f"kernel defaults {where}: field '{key}' must be positive")
    return value


def _tiles_and_scales(
    d: Mapping[str, Any], where: str
) -> tuple[tuple[tuple[int, int], ...], dict[int, float]]:
    """The candidate GEMM tiles and the per-dtype peak scales, validated."""
    try:
        tiles = tuple((int(a), int(b)) for a, b in (d.get("gemm") or {})["tiles"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CostModelError(
            f"kernel defaults {where}: field 'gemm.tiles' must be a list of [rows, cols] pairs"
        ) from exc
    if not tiles or any(a <= 0 or b <= 0 for a, b in tiles):
        raise CostModelError(f"kernel defaults {where}: field 'gemm.tiles' needs positive tiles")
    try:
        scale = {int(k): float(v) for k, v in (d.get("dtype_peak_scale") or {}).items()}
    except (AttributeError, TypeError, ValueError) as exc:
        raise CostModelError(
            f"kernel defaults {where}: field 'dtype_peak_scale' must map "
            f"bytes per element to a factor"
        ) from exc
    return tiles, scale


def _params_from_mapping(
    d: Mapping[str, Any], where: str, peak: tuple[float, str] | None = None
) -> KernelParams:
    """Validate one merged mapping and convert it to SI `KernelParams`; `peak` is the
    resolved (fraction, rule) of the GEMM peak (default: the mapping's own fraction)."""
    gemm = d.get("gemm") or {}
    attn = d.get("attention") or {}
    interference = d.get("interference") or {}
    us = 1e-6
    iwhere = f"{where} interference"
    scalars = {
        "hbm_efficiency": _positive(d, "hbm_efficiency", where),
        "launch_overhead_s": _positive(d, "launch_overhead_us", where, allow_zero=True) * us,
        "min_kernel_s": _positive(d, "min_kernel_us", where, allow_zero=True) * us,
        "vector_peak_fraction": _positive(d, "vector_peak_fraction", where),
        "sustained_clock_fraction": _positive(d, "sustained_clock_fraction", where),
        "cpu_issue_compute_s": _positive(
            d.get("cpu_issue_us") or {}, "compute", f"{where} cpu_issue_us", allow_zero=True
        )
        * us,
        "cpu_issue_collective_s": _positive(
            d.get("cpu_issue_us") or {}, "collective", f"{where} cpu_issue_us", allow_zero=True
        )
        * us,
        "gemm_fixed_s": _positive(gemm, "fixed_us", f"{where} gemm", allow_zero=True) * us,
        "gemm_k_ramp": _positive(gemm, "k_ramp", f"{where} gemm", allow_zero=True),
        "gemm_tile_intensity_knee": _positive(
            gemm, "tile_intensity_knee", f"{where} gemm", allow_zero=True
        ),
        "attention_fwd_fraction": _positive(attn, "fwd_fraction", f"{where} attention"),
        "attention_bwd_fraction": _positive(attn, "bwd_fraction", f"{where} attention"),
        "attention_fa1_ratio": _positive(attn, "fa1_rate_ratio", f"{where} attention")
        if "fa1_rate_ratio" in attn
        else 1.0,
    }
    fraction, rule = peak or (_positive(d, "gemm_peak_fraction", where), "vendor default")
    tiles, scale = _tiles_and_scales(d, where)
    try:
        splits = tuple(int(x) for x in gemm.get("split_k") or (1,))
    except (TypeError, ValueError) as exc:
        raise CostModelError(
            f"kernel defaults {where}: field 'gemm.split_k' must list integers"
        ) from exc
    if not splits or any(x < 1 for x in splits):
        raise CostModelError(f"kernel defaults {where}: field 'gemm.split_k' needs splits >= 1")
    # absent: None, the interference mechanism prices it (simulator/cost/interference.py)
    compute = _at_least_one(interference, "compute", iwhere) if interference else None
    memory = _at_least_one(interference, "memory", iwhere) if interference else None
    return KernelParams(
        interference_compute=compute,
        interference_memory=memory,
        gemm_split_k=splits,
        gemm_peak_fraction=fraction,
        gemm_peak_rule=rule,
        dtype_peak_scale=scale,
        gemm_tiles=tiles,
        **scalars,
    )


def _at_least_one(d: Mapping[str, Any], key: str, where: str) -> float:
    """A stretch factor: a number >= 1 (communication never speeds compute up)."""
    value = _positive(d, key, where)
    if value < 1.0:
        raise CostModelError(f"kernel defaults {where}: field '{key}' must be >= 1")
    return value


def _profiled_fractions(raw: Mapping[str, Any], where: str) -> dict[str, float]:
    """silicon -> profiled GEMM fraction of the advertised peak (section `silicon`)."""
    out = {}
    for name, entry in (raw.get("silicon") or {}).items():
        if not isinstance(entry, Mapping) or not entry.get("source"):
            raise CostModelError(
                f"kernel defaults {where}: field 'silicon.{name}' needs a "
                f"profiled_gemm_fraction and its source"
            )
        out[str(name)] = _positive(entry, "profiled_gemm_fraction", f"{where} silicon.{name}")
    return out


def _micro_fractions() -> dict[str, float]:
    """silicon -> the best micro-benchmark (empirical) GEMM fraction of its GPUs' peaks."""
    out: dict[str, float] = {}
    for spec in gpu_catalogue().values():
        if spec.empirical_gemm_flops is not None:
            frac = spec.empirical_gemm_flops / spec.peak_flops
            out[spec.silicon] = max(out.get(spec.silicon, 0.0), frac)
    return out


def resolve_gemm_peak(
    gpu: GpuSpec, raw: Mapping[str, Any], vendor_fraction: float
) -> tuple[float, str]:
    """The fraction of the advertised peak a large GEMM of `gpu` sustains, and why.

    One rule for every GPU (see kernel_defaults.yaml): its silicon's profiled fraction;
    else its silicon's micro-benchmark fraction times the profiled / micro-benchmark
    ratio of the silicons that have both; else the mean profiled fraction of its vendor's
    silicons (the vendor default when there is none).
    """
    where = str(raw.get("_where", "kernel defaults"))
    profiled = _profiled_fractions(raw, where)
    micro = _micro_fractions()
    if gpu.silicon in profiled:
        src = (raw.get("silicon") or {})[gpu.silicon]["source"]
        return profiled[gpu.silicon], f"profiled {gpu.silicon}: {src}"
    both = sorted(s for s in profiled if s in micro)
    if gpu.silicon in micro and both:
        ratio = sum(profiled[s] / micro[s] for s in both) / len(both)
        return micro[gpu.silicon] * ratio, (
            f"micro-benchmark {micro[gpu.silicon]:.3f} of peak x {ratio:.3f} "
            f"(profiled / micro-benchmark on {', '.join(both)})"
        )
    cat = gpu_catalogue()
    own = sorted(
        {s.silicon for s in cat.values() if s.vendor == gpu.vendor and s.silicon in profiled}
    )
    if own:
        mean = sum(profiled[s] for s in own) / len(own)
        return mean, f"mean profiled fraction of {gpu.vendor} silicon ({', '.join(own)})"
    return vendor_fraction, f"vendor default ({gpu.vendor})"


def kernel_params(gpu: GpuSpec, defaults_path: str | Path | None = None) -> KernelParams:
    """The kernel-model constants of `gpu`: its vendor's defaults plus its own overrides,
    the GEMM peak resolved by `resolve_gemm_peak`.

    `defaults_path` replaces the packaged defaults file (same schema). Raises
    CostModelError naming the file and field when the file is malformed or the vendor
    is unknown.
    """
    raw = raw_defaults(None if defaults_path is None else str(defaults_path))
    where = raw["_where"]
    vendor = raw["vendors"].get(gpu.vendor)
    if vendor is None:
        raise CostModelError(
            f"kernel defaults {where}: field 'vendors.{gpu.vendor}' is "
            f"missing (needed by GPU '{gpu.name}')"
        )
    override = (raw.get("gpus") or {}).get(gpu.name) or {}
    if "gemm_peak_fraction" in override:
        raise CostModelError(
            f"kernel defaults {where}: field 'gpus.{gpu.name}.gemm_peak_fraction': a GPU's "
            f"GEMM peak comes from the one rule (section 'silicon'), not a per-GPU value"
        )
    merged = _merge(vendor, override)
    scope = f"gpus.{gpu.name}" if override else f"vendors.{gpu.vendor}"
    vendor_fraction = _positive(vendor, "gemm_peak_fraction", f"{where} (vendors.{gpu.vendor})")
    peak = resolve_gemm_peak(gpu, raw, vendor_fraction)
    return _params_from_mapping(merged, f"{where} ({scope})", peak)
