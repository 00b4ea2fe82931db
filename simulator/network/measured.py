"""What the collective pricer reads of measured (calibrated) collective tables.

Why: the pricer (network/pricing.py) replaces its model time with a measured table's
where a calibration file gives one; the tables themselves are user-file models that live
with the rest of the calibration format in cost/calibration.py, which imports network/
(its fitted library terms are a `CollectiveModelSpec`). The pricer names only what it
reads, here, and `cost.calibration.Calibration` satisfies it structurally; network/
imports nothing of cost/.
"""

from __future__ import annotations

from typing import Protocol

from simulator.network.protocols import CollectiveModelSpec
from workloads.ops import CollectiveKind


class MeasuredSegment(Protocol):
    """One alpha-beta line of a table: time = alpha_s + beta · bytes over its range."""

    @property
    def alpha_s(self) -> float: ...

    def time_s(self, nbytes: float) -> float: ...


class MeasuredTable(Protocol):
    """The measured cost of one collective on one link tier."""

    @property
    def largest_bytes(self) -> float:
        """The largest message size the table speaks for."""
        ...

    def segment_for(self, nbytes: float) -> MeasuredSegment | None:
        """The alpha-beta segment covering `nbytes`; None when the table has only points."""
        ...

    def busbw_Bps(self, nbytes: float) -> float | None:
        """Bus bandwidth at `nbytes` from measured points; None without points."""
        ...


class MeasuredCollectives(Protocol):
    """A calibration as the pricer sees it: fitted library terms and measured tables per
    GPU type."""

    def network_spec(self, gpu: str) -> CollectiveModelSpec | None:
        """The fitted collective-library terms of one GPU type, if any."""
        ...

    def collective(
        self, gpu: str, tier: str, collective: CollectiveKind, group_size: int | None = None
    ) -> MeasuredTable | None:
        """The table for a collective on a tier (exact group size first), if any."""
        ...
