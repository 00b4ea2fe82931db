"""Click parameter types and options shared by the commands (numbers that must be finite,
one wording for the flags several commands take).

Why: click's FLOAT and FloatRange accept "nan" and "inf" (float("nan") parses, and every
comparison with NaN is false, so range checks pass). A NaN tolerance or multiplier then
runs and yields a silently wrong result; these types reject it as a usage error (exit 2).
"""

from __future__ import annotations

import math
from typing import Any

import click

from topologies.limits import BANDWIDTH_SCALE_RANGE, MAX_BANDWIDTH_GBPS, MIN_BANDWIDTH_GBPS


class FiniteFloat(click.FloatRange):
    """A finite float, optionally within [min, max] (or open bounds with min_open/max_open)."""

    name = "float"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if number is not None and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


# One wording for the flags several commands share (one vocabulary across commands).
NETWORK_HELP = (
    "Network model: contention (concurrent transfers share link bandwidth max-min fairly) "
    "or alpha-beta (each collective priced alone, its own flows sharing its links)."
)
ENGINE_HELP = (
    "Engine mode: auto (symmetric where ranks are interchangeable, else full), full (every "
    "rank simulated) or symmetric (one rank per class)."
)
ALGORITHM_HELP = (
    "Collective algorithm: auto (NCCL-like tuner per collective and size) or one for all."
)

POSITIVE = FiniteFloat(min=0.0, min_open=True)
NON_NEGATIVE = FiniteFloat(min=0.0)
# what-if bandwidths and scales, in the bounds every reader shares (topologies/limits.py)
BANDWIDTH_GBPS = FiniteFloat(min=MIN_BANDWIDTH_GBPS, max=MAX_BANDWIDTH_GBPS)
BANDWIDTH_SCALE = FiniteFloat(min=BANDWIDTH_SCALE_RANGE[0], max=BANDWIDTH_SCALE_RANGE[1])


def network_option() -> Any:
    """`--network`: the run's network model (default: the config's)."""
    return click.option(
        "--network",
        type=click.Choice(("alpha-beta", "contention")),
        default=None,
        help=NETWORK_HELP,
    )


def calibration_option(help: str = "Calibration file from `axsim calibrate`.") -> Any:
    """`--calibration FILE`: a calibration from `axsim calibrate`."""
    return click.option("--calibration", type=click.Path(dir_okay=False), default=None, help=help)
