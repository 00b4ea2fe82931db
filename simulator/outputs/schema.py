"""The published JSON Schema of the report (`axsim schema --report`).

Generated from the Report dataclass so it cannot drift from the code; the versions it
carries are simulator/outputs/versions.py's.
"""

from __future__ import annotations

from simulator.outputs.versions import SCHEMA_VERSION


def report_json_schema() -> dict[str, object]:
    """JSON Schema of `Report.to_json()` (the `--json` / report.json object)."""
    from pydantic import TypeAdapter

    from simulator.outputs.report import Report

    schema: dict[str, object] = TypeAdapter(Report).json_schema(mode="serialization")
    props = schema.setdefault("properties", {})
    assert isinstance(props, dict)
    props["schema_version"] = {
        "const": SCHEMA_VERSION,
        "description": "Version of this report contract (simulator/outputs/versions.py lists them).",
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
