"""Piecewise alpha-beta fits: known lines recovered, every point within tolerance."""

from __future__ import annotations

import numpy as np
import pytest

from validation.calibration.piecewise import SizePoint, fit_line, fit_piecewise, segment_time_s


def _two_regimes(nbytes: float) -> float:
    return 20e-6 + nbytes / 50e9 if nbytes < 1 << 20 else 40e-6 + nbytes / 200e9


def test_two_regimes_recovered_exactly() -> None:
    sizes = [2**k for k in range(10, 28)]
    fit = fit_piecewise([SizePoint(s, _two_regimes(s)) for s in sizes], tolerance=1e-6)
    assert len(fit.segments) == 2
    low, high = fit.segments
    assert low.alpha_s == pytest.approx(20e-6, rel=1e-6)
    assert 1 / low.beta_s_per_byte == pytest.approx(50e9, rel=1e-6)
    assert high.alpha_s == pytest.approx(40e-6, rel=1e-6)
    assert 1 / high.beta_s_per_byte == pytest.approx(200e9, rel=1e-6)
    assert fit.max_rel_error < 1e-6 and fit.points == len(sizes)
    for s in sizes:
        assert segment_time_s(fit.segments, s) == pytest.approx(_two_regimes(s), rel=1e-6)


def test_noisy_sweep_keeps_every_point_within_tolerance() -> None:
    rng = np.random.default_rng(0)
    sizes = np.unique(np.geomspace(2048, 64 << 20, 400).round())
    pts = [SizePoint(s, _two_regimes(s) * (1 + 0.1 * rng.standard_normal())) for s in sizes]
    fit = fit_piecewise(pts, tolerance=0.03)
    assert fit.max_rel_error <= 0.03 + 1e-12
    for p in pts:
        assert abs(segment_time_s(fit.segments, p.bytes) / p.time_s - 1) <= 0.03 + 1e-9
    starts = [s.min_bytes for s in fit.segments]
    assert starts == sorted(starts) and starts[0] == 0.0


def test_lines_are_non_negative() -> None:
    x = np.array([1.0, 2.0, 3.0])
    a, b = fit_line(x, np.array([1.0, 3.0, 5.0]))  # slope 2, intercept -1
    assert a == 0.0 and b > 0
    a, b = fit_line(x, np.array([3.0, 2.0, 1.0]))  # decreasing: flat
    assert b == 0.0 and a > 0


def test_single_point_is_flat_and_bad_points_raise() -> None:
    fit = fit_piecewise([SizePoint(1024, 1e-5)])
    assert fit.segments[0].alpha_s == 1e-5 and fit.segments[0].beta_s_per_byte == 0
    with pytest.raises(ValueError):
        fit_piecewise([])
    with pytest.raises(ValueError):
        fit_piecewise([SizePoint(1024, 0.0)])
    with pytest.raises(ValueError):
        fit_piecewise([SizePoint(1024, 1e-5), SizePoint(1024, 2e-5)])


def _objective(x: np.ndarray, t: np.ndarray, a: float, b: float) -> float:
    return float((((a + b * x) / t - 1.0) ** 2).sum())


def test_fit_line_is_the_exact_non_negative_least_squares() -> None:
    """Against brute force on random sweeps: no grid point of the quadrant does better, and
    the KKT conditions of the non-negative problem hold at the returned pair."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(1, 7))
        x = rng.uniform(0.0, 10.0, n)
        t = rng.uniform(0.1, 10.0, n)
        a, b = fit_line(x, t)
        assert a >= 0.0 and b >= 0.0
        best = _objective(x, t, a, b)
        # brute force: a dense grid over the quadrant around every scale the data allows
        a_grid = np.concatenate([[0.0], np.geomspace(1e-3, 20.0, 120)])
        b_grid = np.concatenate([[0.0], np.geomspace(1e-4, 20.0, 120)])
        aa, bb = np.meshgrid(a_grid, b_grid, indexing="ij")
        pred = aa[..., None] + bb[..., None] * x
        grid = (((pred / t) - 1.0) ** 2).sum(axis=-1)
        assert best <= float(grid.min()) + 1e-9
        # KKT: the gradient vanishes along a free variable and points outward at a bound
        r = (a + b * x) / t - 1.0
        grad_a, grad_b = float((r / t).sum()), float((r * x / t).sum())
        scale = 1e-7 * max(1.0, float(np.abs(1.0 / t).sum() + np.abs(x / t).sum()))
        assert (abs(grad_a) <= scale) if a > 0 else (grad_a >= -scale)
        assert (abs(grad_b) <= scale) if b > 0 else (grad_b >= -scale)


def test_fit_line_matches_scipy_nnls() -> None:
    optimize = pytest.importorskip("scipy.optimize")
    rng = np.random.default_rng(11)
    for _ in range(300):
        n = int(rng.integers(2, 9))
        x, t = rng.uniform(0.0, 10.0, n), rng.uniform(0.1, 10.0, n)
        a, b = fit_line(x, t)
        w = 1.0 / t
        (sa, sb), _ = optimize.nnls(np.stack([w, x * w], axis=1), np.ones(n))
        assert _objective(x, t, a, b) <= _objective(x, t, sa, sb) + 1e-9
