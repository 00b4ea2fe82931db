"""JSON Schemas of the simulator's `--json` outputs and of a sweep's rows.

Why: scripts read these outputs; each carries `schema_version` (versions.py) and has a
schema here, generated from pydantic models (`model_json_schema`) so that `axsim schema
--output COMMAND` prints it and tests/test_json_outputs.py validates every output against
it. The report's own schema is simulator/outputs/schema.py (generated from the Report
dataclass); outputs that embed a report reference it under `$defs.report`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from simulator.outputs.versions import SCHEMA_VERSION

DRAFT = "https://json-schema.org/draft/2020-12/schema"
Number = float | None
Scalar = str | int | float | bool | None


class Stamped(BaseModel):
    """The versions every JSON object axsim writes starts with (versions.stamp)."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = Field(description="Version of the output contract.")
    axsim_version: str = Field(description="axsim package version that wrote it.")


# ------------------------------------------------------------------ collective
class CollectiveRow(Stamped):
    """One message size of `axsim collective --json` (nccl-tests' columns)."""

    bytes: int = Field(ge=0, description="Message size in bytes.")
    time_s: float = Field(ge=0, description="Time of one collective, seconds.")
    algbw_GBps: float = Field(description="bytes / time_s / 1e9.")
    busbw_GBps: float = Field(description="algbw x the collective's nccl-tests factor.")
    algorithm: str
    group_size: int = Field(ge=2)
    instances: int = Field(ge=1, description="Group instances running at once.")
    protocol: str


# ------------------------------------------------------------------ topology
class LinkStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    count: int
    min_GBps: float
    max_GBps: float
    total_GBps: float


class SampleRoute(BaseModel):
    model_config = ConfigDict(extra="forbid")

    label: str
    src_gpu: int
    dst_gpu: int
    paths: int
    hops: int
    max_hops: int
    bottleneck_GBps: Number
    route_bandwidth_GBps: Number
    latency_us: Number
    path: list[str]


class TopologySummary(Stamped):
    """`axsim topology --json` (topologies/summary.py; non-finite numbers as null)."""

    name: str
    description: str
    machine: str
    gpu_type: str | None
    nodes: int
    gpus: int
    gpus_per_node: int
    homogeneous_nodes: bool
    nics_per_node: int | None
    package_size: int
    routing: str | None
    fabric: dict[str, Scalar] = Field(description="The fabric's parameters (by kind).")
    devices: dict[str, int] = Field(description="Device count by kind.")
    links: dict[str, LinkStats] = Field(description="Directed links by kind.")
    num_devices: int
    num_links: int
    injection_per_gpu_GBps: Number
    bisection_GBps: Number
    minimal_bisection_GBps: Number
    node_bisection_GBps: Number
    sample_routes: list[SampleRoute] = []


# ------------------------------------------------------------------ search
class GridAxes(BaseModel):
    model_config = ConfigDict(extra="forbid")

    x: int
    y: int
    z: int
    data: int


class SearchCandidate(BaseModel):
    """One AxoNN grid of `axsim search` (simulator/search/grids.py Candidate.as_dict)."""

    model_config = ConfigDict(extra="forbid")

    grid: GridAxes
    weight_lifetime: str | None
    cached_layers: int | None
    microbatch_sequences: int
    microbatches: int
    memory_per_gpu_bytes: float
    model_comm_time_s: float
    model_comm_by_group_s: dict[str, float]
    model_rank: int
    estimated_iteration_time_s: Number
    estimated_rank: int | None
    simulated_iteration_time_s: Number
    simulated_rank: int | None


class SearchOutput(Stamped):
    """`axsim search --json`: every grid ranked, and the best one's report."""

    ranked: list[SearchCandidate]
    best: dict[str, Any] | None = Field(description="The best grid's report (null: none ran).")


# ------------------------------------------------------------------ compare-strategies
class StrategyEntry(BaseModel):
    """One strategy of `axsim compare-strategies --json` (simulator/search/strategies.py
    outcomes_json): these keys, plus every key of the report when it ran."""

    model_config = ConfigDict(extra="allow")

    schema_version: Literal[1]
    axsim_version: str
    strategy: str
    config: dict[str, Any] | None = Field(description="The chosen parallel section.")
    max_batch_sequences: int | None
    speedup_vs_first: Number
    candidates_feasible: int
    candidates_simulated: int
    search_wall_time_s: float
    batch_note: str | None
    same_program_as: str | None = None
    skipped: str | None = Field(default=None, description="Why it did not run.")


# ------------------------------------------------------------------ presets
class MachineRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    gpu: str
    gpus_per_node: int
    nics_per_node: int
    nic_GBps: float
    fabric: str
    description: str


class ModelRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    params: int
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    seq_len: int
    vocab: int


class GpuRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    display_name: str
    peak_TFLOPs: float
    empirical_gemm_TFLOPs: Number
    memory_GB: float
    hbm_TBps: float


class StrategyRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    summary: str
    chosen_automatically: list[str]


class PresetsOutput(Stamped):
    """`axsim presets [KIND] --json`: the kinds asked for, each a list of rows."""

    machines: list[MachineRow] | None = None
    models: list[ModelRow] | None = None
    gpus: list[GpuRow] | None = None
    strategies: list[StrategyRow] | None = None


# ------------------------------------------------------------------ sweep rows
class SweepRow(BaseModel):
    """One line of a sweep's rows.jsonl (and one row of its table): the lead columns, the
    point's axis values under their dotted keys, and for an `ok` row the report's scalars
    flattened with dots (lists dropped)."""

    model_config = ConfigDict(extra="allow")

    config_hash: str = Field(pattern="^[0-9a-f]{16}$")
    status: Literal["ok", "error"]
    error: str = Field(description="Empty for ok; the one-line reason otherwise.")
    schema_version: Literal[1]
    axsim_version: str


# ------------------------------------------------------------------ documents
def _document(model: type[BaseModel] | None, name: str, title: str, **extra: Any) -> dict[str, Any]:
    schema: dict[str, Any] = {} if model is None else model.model_json_schema()
    schema.update(extra)
    return {
        "$schema": DRAFT,
        "$id": f"urn:axsim:{name}:v{SCHEMA_VERSION}",
        **schema,
        "title": title,
    }


def _with_report(document: dict[str, Any]) -> dict[str, Any]:
    from simulator.outputs.schema import report_json_schema

    report: dict[str, Any] = dict(report_json_schema())
    defs = document.setdefault("$defs", {})
    for key, value in dict(report.pop("$defs", {})).items():
        defs.setdefault(key, value)
    report.pop("$schema", None)
    report.pop("$id", None)
    defs["report"] = report
    return document


def collective_json_schema() -> dict[str, Any]:
    """`axsim collective --json` (and --format json): a list of rows."""
    row = CollectiveRow.model_json_schema()
    return _document(
        None, "collective", "axsim collective output", type="array", items=row, minItems=1
    )


def topology_json_schema() -> dict[str, Any]:
    """`axsim topology --json`."""
    return _document(TopologySummary, "topology", "axsim topology output")


def search_json_schema() -> dict[str, Any]:
    """`axsim search --json` (best: a report, or null)."""
    doc = _with_report(_document(SearchOutput, "search", "axsim search output"))
    doc["properties"]["best"] = {"anyOf": [{"$ref": "#/$defs/report"}, {"type": "null"}]}
    return doc


def compare_strategies_json_schema() -> dict[str, Any]:
    """`axsim compare-strategies --json`: a list, one object per strategy; one that ran
    (no `skipped`, no `same_program_as`) carries the report's required keys too."""
    entry = StrategyEntry.model_json_schema()
    doc = _with_report(
        _document(None, "compare-strategies", "axsim compare-strategies output", type="array")
    )
    doc["$defs"].update(entry.pop("$defs", {}))
    ran = {"required": doc["$defs"]["report"]["required"]}
    entry["if"] = {"not": {"anyOf": [{"required": ["skipped"]}, {"required": ["same_program_as"]}]}}
    entry["then"] = ran
    doc["items"] = entry
    return doc


def presets_json_schema() -> dict[str, Any]:
    """`axsim presets --json`."""
    return _document(PresetsOutput, "presets", "axsim presets output")


def sweep_row_json_schema() -> dict[str, Any]:
    """One row of a sweep (rows.jsonl line; the csv/parquet table has the same columns).
    An ok row holds the report's scalar keys (iteration_time_s, tflops_per_gpu, ...)."""
    doc = _document(SweepRow, "sweep-row", "axsim sweep row")
    doc["additionalProperties"] = {"type": ["string", "number", "integer", "boolean", "null"]}
    doc["if"] = {"properties": {"status": {"const": "ok"}}}
    doc["then"] = {"required": SWEEP_OK_KEYS}
    return doc


SWEEP_OK_KEYS = [
    "iteration_time_s",
    "compute_time_s",
    "exposed_comm_time_s",
    "tflops_per_gpu",
    "percent_of_advertised_peak",
    "memory_per_gpu_bytes",
]
"""Report keys every `ok` sweep row has (scalars of the report; the test checks that
they are in the report's schema)."""
