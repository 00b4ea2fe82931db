"""Calibration: profiler traces and collective benchmarks in, a calibration file out.

`calibrate.py` is the calibrator (`axsim calibrate`); the other modules are its parts:
GEMM tables (gemm), CPU host rates (host), collective samples and tables (collectives,
piecewise, benchmark_logs), the collective library's terms (network), the physical bounds
the evidence must meet (bounds), and the kernel model's terms (kernels/). vidur_check
replays Vidur's collective benchmarks through a calibration.
"""
