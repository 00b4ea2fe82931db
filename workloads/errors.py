"""Errors raised while building or validating workloads."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload (model, strategy parameters or op graph) is invalid; the message names
    the field, op or group at fault."""
