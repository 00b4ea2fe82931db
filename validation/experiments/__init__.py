"""Simulations as tasks, shared by `axsim figures` and `axsim validate`: the task and figure
vocabulary (tasks), the picklable simulation functions (simulations) and the runner that
runs them deduplicated in processes (runner).
"""
