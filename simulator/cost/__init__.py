"""Cost models of compute kernels and the calibration hook.

`KernelModel` prices compute ops on a GPU type (roofline + fitted GEMM efficiency curve,
flash attention, memory-bound kernels, launch gaps, interference under communication);
`Calibration` carries measured tables from traces (GEMM times, collective alpha-beta /
bus-bandwidth tables, interference factors, fitted rates) that override the curves where
they have data.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulator.cost.calibration import (
        AlphaBetaSegment,
        BusBwPoint,
        Calibration,
        CollectiveTable,
        GemmIndex,
        GemmMatch,
        GemmPoint,
        GemmTable,
        GpuCalibration,
        InterferenceFit,
        Provenance,
        TraceRef,
        calibration_from_mapping,
        load_calibration,
        save_calibration,
    )
    from simulator.cost.gemm import best_tile, gemm_efficiency, tile_efficiencies
    from simulator.cost.kernel_params import KernelParams, kernel_params
    from simulator.cost.kernels import KernelModel
    from simulator.cost.terms import INTERFERENCE, LAUNCH_GAPS, Interference

# Names load their module when first used (PEP 562): importing simulator.cost.terms (the
# engine does) must not import the pydantic calibration models, which cost CLI start-up.
_HOME = {
    **dict.fromkeys(
        (
            "AlphaBetaSegment",
            "BusBwPoint",
            "Calibration",
            "CollectiveTable",
            "GemmIndex",
            "GemmMatch",
            "GemmPoint",
            "GemmTable",
            "GpuCalibration",
            "InterferenceFit",
            "Provenance",
            "TraceRef",
            "calibration_from_mapping",
            "load_calibration",
            "save_calibration",
        ),
        "calibration",
    ),
    **dict.fromkeys(("best_tile", "gemm_efficiency", "tile_efficiencies"), "gemm"),
    **dict.fromkeys(("KernelParams", "kernel_params"), "kernel_params"),
    "KernelModel": "kernels",
    **dict.fromkeys(("INTERFERENCE", "LAUNCH_GAPS", "Interference"), "terms"),
}


def __getattr__(name: str) -> object:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'simulator.cost' has no attribute {name!r}")
    return getattr(importlib.import_module(f"simulator.cost.{home}"), name)


__all__ = [
    "INTERFERENCE",
    "LAUNCH_GAPS",
    "AlphaBetaSegment",
    "BusBwPoint",
    "Calibration",
    "CollectiveTable",
    "GemmIndex",
    "GemmMatch",
    "GemmPoint",
    "GemmTable",
    "GpuCalibration",
    "Interference",
    "InterferenceFit",
    "KernelModel",
    "KernelParams",
    "Provenance",
    "TraceRef",
    "best_tile",
    "calibration_from_mapping",
    "gemm_efficiency",
    "kernel_params",
    "load_calibration",
    "save_calibration",
    "tile_efficiencies",
]
