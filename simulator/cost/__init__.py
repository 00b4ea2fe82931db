"""Cost models of compute kernels and the calibration hook.

`KernelModel` prices compute ops on a GPU type (roofline + fitted GEMM efficiency curve,
flash attention, memory-bound kernels, launch gaps, interference under communication);
`Calibration` carries measured tables from traces (GEMM times, collective alpha-beta /
bus-bandwidth tables, interference factors, fitted rates) that override the curves where
they have data.
"""

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
