"""A published number as `axsim validate` checks it (Case) and its comparison (CaseResult).

Its own module so that every family of cases (validation/cases/validate.py's tables, the
claims, the collective curves) can build cases without importing the runner that
collects them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from validation.experiments.tasks import Task


@dataclass(frozen=True)
class Case:
    """One published number: how to simulate it and how close it must be."""

    name: str
    quantity: str
    unit: str
    published: float | None  # None: no published number to compare (an info case)
    tolerance_pct: float | None
    cite: str
    source: str
    tasks: Callable[[bool], list[Task]]
    value: Callable[[list[Any]], tuple[float | None, str]]
    # True where this number helped set a default or preset constant (a consistency
    # check of the fit); False for predictions no constant was chosen from
    fitted: bool = False
    tolerance_abs: float | None = None  # |simulated - published| bound instead of a %
    at_least: float | None = None  # a lower bound on the simulated value instead
    # True when `published` is an upper bound on the simulated value (an error statistic
    # of a measured curve), not a number to match
    bound: bool = False

    @property
    def role(self) -> str:
        return "fit" if self.fitted else "prediction"

    @property
    def tolerance_text(self) -> str:
        """How the case is checked, for tables ('info' when it is not)."""
        if self.published is None:
            return "info"
        if self.bound:
            return f"<= {self.published:g}{self.unit}"
        if self.at_least is not None:
            return f">= {self.at_least:g}"
        if self.tolerance_abs is not None:
            return f"±{self.tolerance_abs:g}"
        return "info" if self.tolerance_pct is None else f"±{self.tolerance_pct:g}%"


@dataclass(frozen=True)
class CaseResult:
    """A case compared: simulated value, signed error and verdict."""

    case: Case
    simulated: float | None  # None: the simulation failed, or (info cases) no value exists
    detail: str
    failed: bool = False

    @property
    def error_pct(self) -> float | None:
        if self.simulated is None or not self.case.published or self.case.bound:
            return None
        return 100.0 * (self.simulated / self.case.published - 1.0)

    @property
    def status(self) -> str:
        c = self.case
        if self.failed or (self.simulated is None and c.published is not None):
            return "failed"
        if c.published is None or self.simulated is None:
            return "info"
        if c.at_least is not None:
            return "ok" if self.simulated >= c.at_least else "outside"
        if c.tolerance_abs is not None:
            return "ok" if abs(self.simulated - c.published) <= c.tolerance_abs else "outside"
        if c.tolerance_pct is None:
            return "info"
        if c.bound:
            return "ok" if self.simulated <= c.published else "outside"
        err = self.error_pct
        return "ok" if err is not None and abs(err) <= c.tolerance_pct else "outside"

    def as_dict(self) -> dict[str, Any]:
        c = self.case
        return {
            "name": c.name,
            "quantity": c.quantity,
            "unit": c.unit,
            "published": c.published,
            "simulated": self.simulated,
            "error_pct": self.error_pct,
            "tolerance_pct": c.tolerance_pct,
            "tolerance_abs": c.tolerance_abs,
            "at_least": c.at_least,
            "check": c.tolerance_text,
            "status": self.status,
            "role": c.role,
            "bound": c.bound,
            "detail": self.detail,
            "cite": c.cite,
            "source": c.source,
        }
