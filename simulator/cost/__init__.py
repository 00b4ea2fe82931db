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

# cheap modules, imported now (kernel_params, a submodule named like its function, must
# be bound to the function after the submodule is imported)
from simulator.cost.gemm import best_tile, gemm_efficiency, tile_efficiencies
from simulator.cost.kernel_params import KernelParams, kernel_params
from simulator.cost.terms import INTERFERENCE, LAUNCH_GAPS, Interference

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
    from simulator.cost.kernels import KernelModel

# The calibration models and the kernel model load when first used (PEP 562): importing
# simulator.cost.terms (the engine does) must not import pydantic, which costs CLI start-up.
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
    "KernelModel": "kernels",
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
