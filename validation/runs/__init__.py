"""A measured run as calibration and comparison see it (measured), the process groups of its
gloo worker threads (gloo_groups), and its simulation (simulate).
"""
