"""Piecewise alpha-beta fits of collective times against message size.

Why piecewise: a collective library switches algorithm and protocol with the message size
(NCCL: LL, LL128, Simple; ring or tree; gloo: different chunking), so one line
`alpha + beta * bytes` cannot follow a whole sweep. The size axis is cut adaptively: each
segment is the longest run of consecutive measured sizes whose weighted least-squares line
(relative error, so small messages count as much as large ones) keeps *every* point
within `tolerance` of the line. Segments are found greedily from the smallest size, which
gives the fewest segments when a run that fits keeps fitting when shortened. A noisy sweep
therefore gets short segments where it is noisy, and the residuals say so.

Lines are constrained to alpha >= 0 and beta >= 0 (time never decreases with size inside
a segment, and a negative latency has no meaning); a single point is a flat segment.
Segment boundaries sit at the geometric mean between the last size of one segment and the
first of the next; the first segment starts at 0 and the last ends at twice its largest
size (the calibration lookup extends the end segments beyond the table).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from simulator.cost.calibration import AlphaBetaSegment

DEFAULT_TOLERANCE = 0.03


@dataclass(frozen=True)
class SizePoint:
    """One message size: its representative time (seconds) and how many samples made it."""

    bytes: float
    time_s: float
    samples: int = 1


@dataclass(frozen=True)
class PiecewiseFit:
    """The segments of one sweep and how well they reproduce it."""

    segments: tuple[AlphaBetaSegment, ...]
    max_rel_error: float
    median_rel_error: float
    points: int
    samples: int

    def residuals(self) -> dict[str, float | int]:
        """Residual summary for provenance."""
        return {
            "points": self.points,
            "samples": self.samples,
            "segments": len(self.segments),
            "max_rel_error": round(self.max_rel_error, 6),
            "median_rel_error": round(self.median_rel_error, 6),
        }


def fit_line(x: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """(alpha, beta) >= 0 minimising the squared relative error sum(((a + b x) / t - 1)^2).

    An exact active-set solve of this two-variable non-negative least squares: the problem
    is a convex quadratic over the quadrant, so its minimum is the unconstrained optimum when
    that is feasible and otherwise the clipped one-variable optimum on one of the two edges
    (or the origin). Every feasible candidate is scored by the objective itself, so the
    returned pair is the true minimiser (tests check it against brute force and the KKT
    conditions).
    """
    if x.size == 1:
        return float(t[0]), 0.0  # a single point is met exactly by a flat line
    w = 1.0 / t
    xw = x * w
    candidates: list[tuple[float, float]] = []
    if x.size > 1 and not np.all(x == x[0]):
        a_mat = np.stack([w, xw], axis=1)
        (a, b), *_ = np.linalg.lstsq(a_mat, np.ones_like(t), rcond=None)
        if a >= 0 and b >= 0:
            return float(a), float(b)
    candidates.append((float(w.sum() / (w * w).sum()), 0.0))  # beta = 0 edge (flat)
    xx = float((xw * xw).sum())
    if xx > 0:
        candidates.append((0.0, max(0.0, float(xw.sum()) / xx)))  # alpha = 0 edge
    return min(candidates, key=lambda ab: _squared_error(x, t, ab[0], ab[1]))


def _squared_error(x: np.ndarray, t: np.ndarray, a: float, b: float) -> float:
    return float((((a + b * x) / t - 1.0) ** 2).sum())


def _max_error(x: np.ndarray, t: np.ndarray, a: float, b: float) -> float:
    return float(np.abs((a + b * x) / t - 1.0).max())


def fit_piecewise(
    points: Sequence[SizePoint], tolerance: float = DEFAULT_TOLERANCE
) -> PiecewiseFit:
    """Segments covering `points` (distinct sizes, any order) within `tolerance`.

    Raises ValueError for an empty sweep or a non-positive time or size.
    """
    if not points:
        raise ValueError("no points to fit")
    pts = sorted(points, key=lambda p: p.bytes)
    x = np.array([p.bytes for p in pts], dtype=np.float64)
    t = np.array([p.time_s for p in pts], dtype=np.float64)
    if (t <= 0).any() or (x <= 0).any() or not np.isfinite(t).all():
        raise ValueError("collective times and sizes must be positive and finite")
    if np.unique(x).size != x.size:
        raise ValueError("one point per message size expected")
    runs: list[tuple[int, int, float, float]] = []
    i, n = 0, x.size
    while i < n:
        j = i + 1
        a, b = fit_line(x[i:j], t[i:j])
        while j < n:
            a2, b2 = fit_line(x[i : j + 1], t[i : j + 1])
            if _max_error(x[i : j + 1], t[i : j + 1], a2, b2) > tolerance:
                break
            a, b, j = a2, b2, j + 1
        runs.append((i, j, a, b))
        i = j
    segments = []
    for k, (lo, hi, a, b) in enumerate(runs):
        start = 0.0 if k == 0 else math.sqrt(x[runs[k - 1][1] - 1] * x[lo])
        stop = 2.0 * x[hi - 1] if k == len(runs) - 1 else math.sqrt(x[hi - 1] * x[hi])
        segments.append(
            AlphaBetaSegment(min_bytes=start, max_bytes=stop, alpha_s=a, beta_s_per_byte=b)
        )
    pred = np.concatenate([a + b * x[lo:hi] for lo, hi, a, b in runs])
    err = np.abs(pred / t - 1.0)
    return PiecewiseFit(
        segments=tuple(segments),
        max_rel_error=float(err.max()),
        median_rel_error=float(np.median(err)),
        points=int(x.size),
        samples=sum(p.samples for p in pts),
    )


def segment_time_s(segments: Sequence[AlphaBetaSegment], nbytes: float) -> float:
    """The fitted time at `nbytes` (the covering segment; end segments beyond the range)."""
    starts = [s.min_bytes for s in segments]
    idx = max(int(np.searchsorted(starts, nbytes, side="right")) - 1, 0)
    return segments[idx].time_s(nbytes)
