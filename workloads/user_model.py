"""The pydantic base of every user-facing settings model (configs, strategy parameters).

Why a base: two input mistakes pass pydantic's lax mode silently. A boolean where a number
belongs (`gpus: true`, `nic_bandwidth_GBps: yes`) is read as 1, and `.inf` / `.nan`
pass `gt=0` checks. The base rejects both and keeps the models frozen with unknown keys
forbidden. It lives in workloads/, the lowest package with settings models, so that the
strategy parameters here and the simulator's config share it.
"""

from __future__ import annotations

from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, model_validator


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
                    raise ValueError(f"{name}: expected a number, got the boolean {value}")
        return data
