"""Typed errors of the simulator. The CLI prints each as one line and exits with code 2."""

from __future__ import annotations


class SimulatorError(ValueError):
    """Base class of errors caused by user input to the simulator."""


class ConfigError(SimulatorError):
    """An experiment configuration or CLI flag is invalid; the message names the field."""


class EngineError(SimulatorError):
    """The engine cannot run a workload (deadlock, unknown group on the topology...)."""


class CostModelError(SimulatorError):
    """A cost model input is invalid (unsupported algorithm, bad calibration file...)."""
