"""Trials: many configurations simulated through the API (`simulator.api.simulate`).

The search's simulating stage (`axsim search`'s top few, `simulate` without a grid, the
paper's procedure), compare-strategies' candidates and `axsim bench`'s scaling cases.
A room above api.py: search/ (the ranking and static replay that `simulate` itself uses
to choose a grid) and benchmarks/ (collective micro-benchmarks) stay below it.
"""
