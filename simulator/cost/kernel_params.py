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
from topologies.hardware import GpuSpec

DEFAULTS_FILE = "data/kernel_defaults.yaml"


@dataclass(frozen=True, slots=True)
class KernelParams:
    """The constants of the kernel model for one GPU (SI units).

    `gemm_peak_fraction` only matters when the GPU has no empirical GEMM peak, or when
    `fitted_gemm_peak` says the fraction was fitted on measured kernels of this silicon
    and takes precedence. `tiles` are
    the candidate GEMM output tiles (rows, cols) the model chooses among, as cuBLAS and
    hipBLASLt heuristics roughly do; `tile_intensity_knee` sets how much less efficient
    a small tile is than the largest one (see gemm.py).
    """

    gemm_peak_fraction: float
    fitted_gemm_peak: bool
    hbm_efficiency: float
    launch_overhead_s: float
    min_kernel_s: float
    vector_peak_fraction: float
    overlap_slowdown: float
    cpu_issue_compute_s: float
    cpu_issue_collective_s: float
    dtype_peak_scale: Mapping[int, float]
    gemm_fixed_s: float
    gemm_k_ramp: float
    gemm_tile_intensity_knee: float
    gemm_tiles: tuple[tuple[int, int], ...]
    attention_fwd_fraction: float
    attention_bwd_fraction: float


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
def _raw_defaults(path: str | None) -> dict[str, Any]:
    """The parsed defaults file (the packaged one when `path` is None)."""
    if path is None:
        text = resources.files("simulator.cost").joinpath(DEFAULTS_FILE).read_text()
        where = f"simulator/cost/{DEFAULTS_FILE}"
    else:
        where = path
        try:
            text = Path(path).read_text()
        except OSError as exc:
            raise CostModelError(f"kernel defaults {path}: cannot read ({exc.strerror})") from exc
        except UnicodeDecodeError:
            raise CostModelError(f"kernel defaults {path}: not a text file (not UTF-8)") from None
    try:
        raw = yaml.safe_load(text)
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


def _params_from_mapping(d: Mapping[str, Any], where: str) -> KernelParams:
    """Validate one merged mapping and convert it to SI `KernelParams`."""
    gemm = d.get("gemm") or {}
    attn = d.get("attention") or {}
    us = 1e-6
    scalars = {
        "gemm_peak_fraction": _positive(d, "gemm_peak_fraction", where),
        "hbm_efficiency": _positive(d, "hbm_efficiency", where),
        "launch_overhead_s": _positive(d, "launch_overhead_us", where, allow_zero=True) * us,
        "min_kernel_s": _positive(d, "min_kernel_us", where, allow_zero=True) * us,
        "vector_peak_fraction": _positive(d, "vector_peak_fraction", where),
        "overlap_slowdown": _positive(d, "overlap_slowdown", where),
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
    }
    tiles, scale = _tiles_and_scales(d, where)
    return KernelParams(
        fitted_gemm_peak=bool(d.get("fitted_gemm_peak", False)),
        dtype_peak_scale=scale,
        gemm_tiles=tiles,
        **scalars,
    )


def kernel_params(gpu: GpuSpec, defaults_path: str | Path | None = None) -> KernelParams:
    """The kernel-model constants of `gpu`: its vendor's defaults plus its own overrides.

    `defaults_path` replaces the packaged defaults file (same schema). Raises
    CostModelError naming the file and field when the file is malformed or the vendor
    is unknown.
    """
    raw = _raw_defaults(None if defaults_path is None else str(defaults_path))
    where = raw["_where"]
    vendor = raw["vendors"].get(gpu.vendor)
    if vendor is None:
        raise CostModelError(
            f"kernel defaults {where}: field 'vendors.{gpu.vendor}' is "
            f"missing (needed by GPU '{gpu.name}')"
        )
    override = (raw.get("gpus") or {}).get(gpu.name) or {}
    merged = _merge(vendor, override)
    scope = f"gpus.{gpu.name}" if override else f"vendors.{gpu.vendor}"
    return _params_from_mapping(merged, f"{where} ({scope})")
