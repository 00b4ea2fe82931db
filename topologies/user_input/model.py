"""The pydantic base of every user file (configs, strategy parameters, custom topology
files, sweep specs, calibration and claim files) and the one line its errors print as.

Why a base: two input mistakes pass pydantic's lax mode silently. A boolean where a number
belongs (`gpus: true`, `nic_bandwidth_GBps: yes`) is read as 1, and `.inf` / `.nan`
pass `gt=0` checks. The base rejects both and keeps the models frozen with unknown keys
forbidden.

Why here: topologies/ is the leaf package (it imports none of ours) and custom topology
files are its concern, so the base lives at the bottom where every package may import it.
workloads/ imports exactly this module of topologies/ (docs/DESIGN.md, the architecture
test): it is shared vocabulary, not topology knowledge.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError


def _expected(annotation: Any) -> str:
    """What a field holds, in words, for the message when a boolean stands in for it."""
    union = get_origin(annotation) is Union or type(annotation).__name__ == "UnionType"
    args = [a for a in get_args(annotation) if a is not type(None)] if union else [annotation]
    if all(isinstance(a, type) and issubclass(a, BaseModel) for a in args):
        return "a mapping"
    if all(a in (int, float) for a in args):
        return "a number"
    if all(get_origin(a) in (tuple, list) or a in (tuple, list) for a in args):
        return "a list"
    if all(a is str for a in args):
        return "a text value"
    if len(args) == 1 and get_origin(args[0]) is Literal:
        return "one of " + ", ".join(map(str, get_args(args[0])))
    return "a value of another type"


def _admits_bool(annotation: Any) -> bool:
    if annotation is bool:
        return True
    if get_origin(annotation) is Union or type(annotation).__name__ == "UnionType":
        return any(_admits_bool(a) for a in get_args(annotation))
    return annotation is Any


class UserModel(BaseModel):
    """Frozen, no unknown keys, no NaN or infinity, no boolean for a number."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, data: Any) -> Any:
        # a model validator, not a field one: pydantic forbids before-validators on the
        # `strategy` discriminator field
        if isinstance(data, dict):
            for name, value in data.items():
                field = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and field and not _admits_bool(field.annotation):
                    # the field rides in the context: configs print it as part of the path
                    raise PydanticCustomError(
                        "bool_for_value",
                        "expected {expected}, got the boolean {value}",
                        {
                            "field": name,
                            "expected": _expected(field.annotation),
                            "value": str(value).lower(),
                        },
                    )
        return data


def first_error_line(exc: ValidationError, source: str, *, skip: Collection[str] = ()) -> str:
    """The one line a user sees for a validation error: `SOURCE: dotted.field: message`,
    with ` (and N more)` when pydantic found more than one problem.

    `skip` names location parts that are not fields the user wrote (a discriminated
    union's tag, e.g. the strategy name in `parallel.axonn.grid`); pydantic's `[key]`
    marker (a bad mapping key) is dropped the same way. Why one formatter: every user file
    (config, custom topology, sweep spec, calibration, claim) reports mistakes in the same
    words, so a user learns the shape once and tests can pin it.
    """
    errors = exc.errors()
    first = errors[0]
    path = [
        str(part)
        for part in first["loc"]
        if not (isinstance(part, str) and (part in skip or part == "[key]"))
    ]
    if first["type"] == "bool_for_value":  # raised by the model for one of its fields
        path.append(str(first.get("ctx", {}).get("field", "")))
    msg = str(first["msg"]).removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        msg = "unknown field"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    where = f"{'.'.join(path)}: " if path else ""
    return f"{source}: {where}{msg}{more}"
