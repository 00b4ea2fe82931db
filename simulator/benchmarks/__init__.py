"""Measuring: the engine's scaling benchmark (`axsim bench`) and collective
micro-benchmarks on a topology (`axsim collective`)."""
