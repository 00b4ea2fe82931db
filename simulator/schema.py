"""Versions stamped on every JSON output, and the published JSON Schema of the report.

Why: scripts, sweeps and dashboards read `axsim simulate --json`; a key that changes
meaning must be detectable. Every JSON object axsim writes carries `schema_version` (of
the report contract: bumped on any incompatible change of a key's name, unit or meaning)
and `axsim_version` (the package that wrote it). `axsim schema --report` prints the
report's JSON Schema (draft 2020-12), generated from the Report dataclass so it cannot
drift from the code.

Versions of the report contract:
- 1: first versioned report: + `schema_version`, `axsim_version`,
  `comm_time_by_native_group_s` / `comm_total_by_native_group_s` (the strategy's own
  group names), `group_axes` (native group -> x/y/z/data/pp), `model_preset`,
  `model_overrides`, `model_custom`; `model` says "custom" for an overridden shape.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

SCHEMA_VERSION = 1


@cache
def axsim_version() -> str:
    """The installed axsim's version ("unknown" when run from an uninstalled tree)."""
    try:
        return metadata.version("axsim")
    except metadata.PackageNotFoundError:
        return "unknown"


def stamp(data: dict[str, object]) -> dict[str, object]:
    """`data` with `schema_version` and `axsim_version` first."""
    return {"schema_version": SCHEMA_VERSION, "axsim_version": axsim_version(), **data}


def report_json_schema() -> dict[str, object]:
    """JSON Schema of `Report.to_json()` (the `--json` / report.json object)."""
    from pydantic import TypeAdapter

    from simulator.report import Report

    schema: dict[str, object] = TypeAdapter(Report).json_schema(mode="serialization")
    props = schema.setdefault("properties", {})
    assert isinstance(props, dict)
    props["schema_version"] = {
        "const": SCHEMA_VERSION,
        "description": "Version of this report contract (simulator/schema.py lists them).",
    }
    props["axsim_version"] = {"type": "string", "description": "axsim package version."}
    props["memory_per_gpu_GB"] = {"type": "number", "description": "memory_per_gpu_bytes / 1e9."}
    required = schema.setdefault("required", [])
    assert isinstance(required, list)
    required += ["schema_version", "axsim_version", "memory_per_gpu_GB"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"urn:axsim:report:v{SCHEMA_VERSION}",
        **schema,
        "title": "axsim report",
        "description": "One simulated training iteration (`axsim simulate --json`). Units "
        "are in the key names (_s seconds, _bytes bytes, _GB 10^9 bytes).",
    }
