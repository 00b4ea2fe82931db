"""Versions stamped on every JSON output.

Why: scripts, sweeps and dashboards read `axsim simulate --json`; a key that changes
meaning must be detectable. Every JSON object axsim writes carries `schema_version` (of
the report contract: bumped on any incompatible change of a key's name, unit or meaning)
and `axsim_version` (the package that wrote it).
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
