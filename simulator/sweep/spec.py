"""Sweep specs: parsing, axis-key checks, the cartesian product and config hashes.

A spec is a mapping with `base` (the embedded default, a config path relative to the
spec, or an inline config mapping), `set` (fixed dotted overrides) and `axes` (dotted key
-> list of values; "a,b" names linked keys varied together). Its shape is a pydantic model
(`SweepSpecFile` on the shared `UserModel` base; `axsim schema --sweep` prints its JSON
Schema), so a wrong type or an unknown key is one line `SPEC: axes.cluster.gpus: Input
should be a valid list`. Axis keys are then checked against the config schema up front
(any strategy's parallel fields count), so a typo is one error before anything runs, not
a column of failed rows.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from simulator.config import (
    ExperimentConfig,
    apply_overrides,
    default_config_mapping,
    parse_override,
    read_yaml_file,
    read_yaml_mapping,
    validate_config,
)
from simulator.errors import SimulatorError
from simulator.outputs.versions import stamp
from topologies.user_input.model import UserModel, first_error_line

# Most points one spec may expand to. Expanding a point (overrides applied, config
# validated, hashed) costs about 1 ms and 8 KB here (1,000 points: 0.9 s, 53 MB in all),
# so 2^16 points take about a minute and half a GB before the first row; a 10^6-point spec
# built for 20 minutes and over a GB, where the user had meant a few thousand.
MAX_SWEEP_POINTS = 1 << 16


class SweepError(SimulatorError):
    """A sweep spec or option is invalid (the CLI prints one line and exits 2)."""


@dataclass(frozen=True)
class Axis:
    """Keys varied together (one key, or linked keys) and their values (one tuple each)."""

    keys: tuple[str, ...]
    values: tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class SweepSpec:
    """A validated spec: the base mapping (fixed overrides applied) and the axes."""

    base: dict[str, Any]
    axes: tuple[Axis, ...]
    source: str = "spec"

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(k for a in self.axes for k in a.keys)


@dataclass(frozen=True)
class SweepPoint:
    """One point of the product: its axis values, raw mapping and config hash."""

    values: dict[str, Any]
    data: dict[str, Any]
    config_hash: str
    error: str | None = None


# ------------------------------------------------------------------ spec
AxisValues = Annotated[list[Any], Field(min_length=1)]


class SweepSpecFile(UserModel):
    """The shape of a sweep spec file; the keys' meaning is checked by `parse_spec`."""

    base: str | dict[str, Any] | None = Field(
        None,
        description="'default' (the embedded default, also when absent), a config path "
        "relative to the spec, or an inline config mapping.",
    )
    fixed: dict[str, Any] | None = Field(
        None, alias="set", description="Fixed dotted overrides applied to the base."
    )
    axes: dict[str, AxisValues] = Field(
        min_length=1,
        description="Dotted key -> list of values; 'a,b' links keys varied together (each "
        "value then lists one value per key).",
    )

    @field_validator("base", mode="before")
    @classmethod
    def _base_kind(cls, v: Any) -> Any:
        # before the union, whose per-member errors would name pydantic's types
        if v is None or isinstance(v, str | Mapping):
            return v
        raise ValueError("give 'default', a config path or an inline config mapping")


def sweep_spec_json_schema() -> dict[str, Any]:
    """JSON Schema of a sweep spec file, for editors (`axsim schema --sweep`)."""
    return SweepSpecFile.model_json_schema(by_alias=True)


def _submodels(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models a field can hold (unions, Optional, Annotated unwrapped)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType, typing.Annotated, tuple, list):
        return [m for a in typing.get_args(annotation) for m in _submodels(a)]
    return []


def check_key(key: str) -> None:
    """Raise SweepError unless `key` names a field of ExperimentConfig (any strategy's)."""
    parts = [p for p in key.split(".") if p]
    if len(parts) < 2:
        raise SweepError(f"axis '{key}': name a section and a field, e.g. cluster.gpus")
    models: list[type[BaseModel]] = [ExperimentConfig]
    for i, part in enumerate(parts):
        fields = [m.model_fields[part] for m in models if part in m.model_fields]
        if not fields:
            where = ".".join(parts[:i]) or "the config"
            known = sorted({f for m in models for f in m.model_fields})
            raise SweepError(
                f"axis '{key}': unknown field '{part}' in {where} (known: {', '.join(known)})"
            )
        models = [m for f in fields for m in _submodels(f.annotation)]
        if i < len(parts) - 1 and not models:
            raise SweepError(f"axis '{key}': '{'.'.join(parts[: i + 1])}' is not a section")


def _base_mapping(base: str | dict[str, Any] | None, spec_dir: Path, source: str) -> dict[str, Any]:
    if base is None or base == "default":
        return default_config_mapping()
    if isinstance(base, str):
        path = Path(base) if Path(base).is_absolute() else spec_dir / base
        data = read_yaml_mapping(path)
    else:
        data = dict(base)
    for key in _leaf_keys(data):  # a typo fails here, not as an error row per point
        try:
            check_key(key)
        except SweepError as exc:
            raise SweepError(f"{source}: base: {str(exc).removeprefix('axis ')}") from None
    return data


def _leaf_keys(data: Mapping[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys of a nested config mapping down to its non-mapping values."""
    keys = []
    for name, value in data.items():
        key = f"{prefix}{name}"
        if isinstance(value, Mapping) and value:
            keys += _leaf_keys(value, key + ".")
        else:
            keys.append(key)
    return keys


def _axis(name: str, raw: list[Any], source: str) -> Axis:
    keys = tuple(k.strip() for k in name.split(",") if k.strip())
    try:
        for k in keys:
            check_key(k)
    except SweepError as exc:
        raise SweepError(f"{source}: {exc}") from None
    values = []
    for v in raw:
        tup = tuple(v) if len(keys) > 1 and isinstance(v, list) else (v,)
        if len(tup) != len(keys):
            raise SweepError(f"{source}: axis '{name}': value {v!r} must list {len(keys)} values")
        values.append(tup)
    return Axis(keys, tuple(values))


def parse_spec(
    data: Mapping[str, Any], spec_dir: Path = Path("."), source: str = "spec"
) -> SweepSpec:
    """Validate a spec mapping (keys: base, set, axes); SweepError names `source` and the
    field."""
    try:
        spec = SweepSpecFile.model_validate(dict(data))
    except ValidationError as exc:
        raise SweepError(first_error_line(exc, source)) from None
    base = _base_mapping(spec.base, spec_dir, source)
    for k, v in resets_first(list((spec.fixed or {}).items())):
        try:
            check_key(k)
        except SweepError as exc:
            raise SweepError(f"{source}: set: {str(exc).removeprefix('axis ')}") from None
        base = set_value(base, k, v)
    sizes = [len(v) for v in spec.axes.values()]
    if math.prod(sizes) > MAX_SWEEP_POINTS:  # from the formula, before any point is built
        raise SweepError(
            f"{source}: axes: {' x '.join(map(str, sizes))} = {math.prod(sizes):,} points, "
            f"more than the {MAX_SWEEP_POINTS:,} a sweep may have; split it into several specs"
        )
    axes = tuple(_axis(k, v, source) for k, v in spec.axes.items())
    cols = [k for a in axes for k in a.keys]
    if len(set(cols)) != len(cols):
        raise SweepError(f"{source}: axes: a key appears on two axes")
    return SweepSpec(base, axes, source)


def with_overrides(spec: SweepSpec, sets: Sequence[str]) -> SweepSpec:
    """The spec with `--set` overrides applied to its base (the same parser as
    `axsim simulate --set`); a key the axes vary is refused (the axis would win)."""
    if not sets:
        return spec
    axis_keys = set(spec.columns)
    for item in sets:
        key = ".".join(parse_override(item)[0])
        if key in axis_keys:
            raise SweepError(f"--set {item!r}: {key} is an axis of the spec (the axis sets it)")
    return replace(spec, base=apply_overrides(spec.base, sets))


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a spec file."""
    p = Path(path)
    data = read_yaml_file(p, "sweep spec", SweepError)
    if not isinstance(data, Mapping):
        raise SweepError(f"{p}: the spec must be a mapping with base, set and axes")
    return parse_spec(data, p.parent, str(p))


# ------------------------------------------------------------------ points
def set_value(data: Mapping[str, Any], key: str, value: Any) -> dict[str, Any]:
    """Apply one axis value (dotted key) with the conveniences of `axsim simulate`
    (`apply_overrides`: a new strategy resets the parallel section, a GPU count replaces a
    node count), and a number for cluster.stragglers means one straggler (rank 0) with
    that slowdown."""
    if key == "cluster.stragglers":
        if isinstance(value, int | float) and not isinstance(value, bool):
            value = [{"rank": 0, "slowdown": value}]
        elif isinstance(value, Mapping):
            value = [dict(value)]
    return apply_overrides(data, [f"{key}={json.dumps(value)}"])


def resets_first(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Assignments in application order: a strategy (which resets the parallel section)
    before the parallel fields that belong to it, the rest in spec order."""
    return sorted(items, key=lambda kv: kv[0] != "parallel.strategy")


def config_hash(config: ExperimentConfig) -> str:
    """Stable hash of the resolved config (defaults filled in, keys sorted)."""
    return _digest(config.model_dump(mode="json"))


def _digest(obj: Any) -> str:
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cell(value: Any) -> Any:
    """A table cell: scalars as they are, lists and mappings as compact JSON."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def points(spec: SweepSpec) -> list[SweepPoint]:
    """The cartesian product in spec order; points whose config does not validate carry
    the error (their hash is that of the raw mapping)."""
    out = []
    for combo in itertools.product(*(a.values for a in spec.axes)):
        values = {
            k: v
            for a, tup in zip(spec.axes, combo, strict=True)
            for k, v in zip(a.keys, tup, strict=True)
        }
        data = spec.base
        error = None
        for k, v in resets_first(list(values.items())):
            try:
                data = set_value(data, k, v)
            except SimulatorError as e:
                error = error or f"{type(e).__name__}: {e}"
        if error is None:
            try:
                h = config_hash(validate_config(data, source=spec.source))
            except SimulatorError as e:
                error, h = f"{type(e).__name__}: {e}", _digest(data)
        else:
            h = _digest(data)
        out.append(SweepPoint(values, data, h, error))
    return out


def make_row(point: SweepPoint, status: str, payload: Any) -> dict[str, Any]:
    """The row of a finished point (lead columns, axes, report scalars)."""
    row: dict[str, Any] = {"config_hash": point.config_hash, "status": status}
    row["error"] = "" if status == "ok" else str(payload)
    if status != "ok":  # an ok row has them from its report, in the report's place
        row.update(stamp({}))
    row.update({k: cell(v) for k, v in point.values.items()})
    if status == "ok":
        row.update({k: v for k, v in payload.items() if k not in row})
    return row
