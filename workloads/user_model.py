"""The pydantic base of every user-facing settings model (configs, strategy parameters).

Why a base: two input mistakes pass pydantic's lax mode silently. A boolean where a number
belongs (`gpus: true`, `nic_bandwidth_GBps: yes`) is read as 1, and `.inf` / `.nan`
pass `gt=0` checks. The base rejects both and keeps the models frozen with unknown keys
forbidden. It lives in workloads/, the lowest package with settings models, so that the
strategy parameters here and the simulator's config share it.
"""

from __future__ import annotations

from typing import Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator
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
