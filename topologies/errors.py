"""Errors raised by topology builders and routing.

Every error names the offending field or element so the CLI can print one clear line.
"""

from __future__ import annotations


class TopologyError(ValueError):
    """A topology description or query is invalid (unknown machine, dangling link, ...)."""
