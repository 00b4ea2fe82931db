"""Measuring collectives on a topology: micro-benchmarks (`axsim collective`) and the
nccl-tests table. Below api.py (search/analytical.py measures group bandwidths through
it); `axsim bench`, which simulates whole runs, is trials/scaling.py."""
