"""Published values on the paper figures: one mechanism for every figure.

Why: a simulated figure is only evidence next to the numbers it claims to reproduce.
Each figure registers which published values the repository holds for it
(`register(figure, loader)`: a function returning `PublishedSeries`, read from
validation/published/) or states that it holds none (`register_missing(figure, why)`).
`overlay(ax, figure, ...)` draws the registered series in one style (black markers,
dashed, labelled "published: ..."), and `caption_lines(figure)` gives the caption its
sentence: what is overlaid with its source, or that no published value is available and
why. A figure that registers nothing gets "no published values registered", so a
missing overlay is visible, never silent.

Strategy figures (issue 19 adds ZeRO++/Optimus ratios) register their series here the
same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PublishedSeries:
    """Published points of one quantity on one axis of a figure."""

    label: str  # what it is, e.g. "AxoNN SC'24 Table III"
    x: Sequence[float]
    y: Sequence[float]
    source: str  # where the numbers come from (paper, table, file)
    axis: str = ""  # which subplot it belongs to, when a figure has several
    approximate: bool = False  # read off a plot rather than a table


_LOADERS: dict[str, Callable[[], list[PublishedSeries]]] = {}
_MISSING: dict[str, str] = {}


def register(figure: str, loader: Callable[[], list[PublishedSeries]]) -> None:
    """Declare the published series of `figure` (called at import of its module)."""
    _LOADERS[figure] = loader


def register_missing(figure: str, why: str) -> None:
    """Declare that the repository holds no published value for `figure`, and why."""
    _MISSING[figure] = why


def series(figure: str, axis: str = "") -> list[PublishedSeries]:
    """The registered series of `figure` (on subplot `axis` when given)."""
    loader = _LOADERS.get(figure)
    found = loader() if loader else []
    return [s for s in found if not axis or s.axis == axis]


def overlay(
    ax: Any,
    figure: str,
    axis: str = "",
    x_map: Callable[[float], float] | None = None,
    connect: bool = True,
) -> int:
    """Draw `figure`'s published series on `ax`; returns how many points were drawn.
    `connect=False` draws markers only (points on a categorical axis are not a curve)."""
    drawn = 0
    for i, s in enumerate(series(figure, axis)):
        xs = [x_map(x) if x_map else x for x in s.x]
        marker = ("s", "D", "^", "v")[i % 4]
        label = f"published: {s.label}" + (" (≈, read off a plot)" if s.approximate else "")
        ax.plot(xs, list(s.y), marker=marker, linestyle="--" if connect else "none",
                color="black", markerfacecolor="none", markersize=8, markeredgewidth=1.5,
                label=label)  # fmt: skip
        drawn += len(xs)
    return drawn


def caption_lines(figure: str) -> list[str]:
    """The caption's statement about published values for `figure`."""
    found = series(figure)
    if found:
        return [
            f"Published (overlaid, black): {s.label}"
            + (", approximate (read off a plot)" if s.approximate else "")
            + f". Source: {s.source}."
            for s in found
        ]
    if figure in _MISSING:
        return [f"Published values: not available in the repository. {_MISSING[figure]}"]
    return ["Published values: none registered for this figure."]
