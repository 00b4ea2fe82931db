"""JSON Schemas of the validation commands' `--json` outputs (calibrate, compare,
figures, validate), as pydantic models (the simulator's are simulator/outputs/
json_schemas.py; `axsim schema --output COMMAND` prints either, tests/test_json_outputs.py
validates every output against its schema)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.outputs.json_schemas import DRAFT, Number, Stamped
from simulator.outputs.versions import SCHEMA_VERSION


class GpuCalibration(BaseModel):
    """What a calibration file holds for one GPU type."""

    model_config = ConfigDict(extra="forbid")

    gemm_shapes: int
    collective_tables: int
    max_collective_rel_error: Number
    overlap_slowdown: Number
    interference: dict[str, Any] | None
    rates: dict[str, Any] | None
    network_fit: dict[str, Any] | None


class CalibrateOutput(Stamped):
    """`axsim calibrate INPUT... -o FILE --json`: the file written and its summary."""

    out: str
    gpus: dict[str, GpuCalibration]


class LeaveOneOutCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case: str
    gpu: str
    coverage: float = Field(ge=0, le=1, description="Share of kernel time whose work is known.")
    own_gpu_evidence: bool
    gemm_peak_rule: str
    measured_s: dict[str, float]
    predicted_s: dict[str, float]
    error: dict[str, Number] = Field(description="predicted / measured - 1 per row.")


class LeaveOneOutOutput(Stamped):
    """`axsim calibrate --leave-one-out --json`: each input predicted by the others."""

    tolerance: float
    cases: list[LeaveOneOutCase]


class CompareRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    scope: str
    name: str
    measured_s: Number
    simulated_s: Number
    error: Number


class CompareOutput(Stamped):
    """`axsim compare --json` (validation/compare.py Comparison.to_json)."""

    traces: str
    config: str
    calibration: str | None
    tolerance: float
    passed: bool
    iteration_error: Number
    measured_steps_s: list[float]
    rows: list[CompareRow]


class FigureOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    files: list[str]
    numbers: list[dict[str, Any]]
    error: str | None


class FiguresOutput(Stamped):
    """`axsim figures --json` (also the folder's summary.json)."""

    wall_time_s: float
    reduced: bool
    task_wall_s: dict[str, float]
    figures: list[FigureOutput]


class CaseOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    quantity: str
    unit: str
    published: Number
    simulated: Number
    error_pct: Number
    tolerance_pct: Number
    tolerance_abs: Number
    at_least: Number
    check: str
    status: Literal["ok", "outside", "failed", "info"]
    role: str
    bound: bool
    detail: str
    cite: str
    source: str


class ValidateOutput(Stamped):
    """`axsim validate --json`."""

    wall_time_s: float
    reduced: bool
    cases: list[CaseOutput]


def _document(schema: dict[str, Any], name: str) -> dict[str, Any]:
    return {
        "$schema": DRAFT,
        "$id": f"urn:axsim:{name}:v{SCHEMA_VERSION}",
        **schema,
        "title": f"axsim {name} output",
    }


def calibrate_schema() -> dict[str, Any]:
    """Either the calibration summary or, with --leave-one-out, the held-out cases."""
    a, b = CalibrateOutput.model_json_schema(), LeaveOneOutOutput.model_json_schema()
    defs = {**a.pop("$defs", {}), **b.pop("$defs", {})}
    return _document({"$defs": defs, "oneOf": [a, b]}, "calibrate")


def compare_schema() -> dict[str, Any]:
    return _document(CompareOutput.model_json_schema(), "compare")


def figures_schema() -> dict[str, Any]:
    return _document(FiguresOutput.model_json_schema(), "figures")


def validate_schema() -> dict[str, Any]:
    return _document(ValidateOutput.model_json_schema(), "validate")
