"""The real 4D implementation that produces calibration traces.

A compact PyTorch implementation of AxoNN's 4D hybrid algorithm (linear.py, comm.py,
model.py) and the real axonn 0.2.0 package behind the same GPT block stack
(axonn_impl.py, with its CPU shim), checked against a single-process reference
(numerics.py) and traced with torch.profiler (trace.py, `axsim trace-torch`).

Modules that need torch are imported lazily, so `config` (grids, presets, run specs)
works without it.
"""

from __future__ import annotations

from typing import Any

from validation.torch4d.config import (
    PRESETS,
    Grid,
    ModelDims,
    Overlap,
    RunSpec,
    parse_grid,
    parse_overlap,
)

__all__ = [
    "PRESETS",
    "Case",
    "Grid",
    "ModelDims",
    "Overlap",
    "RunSpec",
    "parse_grid",
    "parse_overlap",
    "run_numerics",
    "run_trace",
]


def __getattr__(name: str) -> Any:
    if name == "run_trace":
        from validation.torch4d.trace import run_trace

        return run_trace
    if name in ("run_numerics", "Case"):
        from validation.torch4d import numerics

        return getattr(numerics, name)
    raise AttributeError(name)
