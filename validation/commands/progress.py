"""The progress bar of validation's long commands (figures, validate): simulator's counted
bar, fed (done, total, item label) as validation's runners report it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from simulator.outputs.render import count_bar
from validation.experiments.runner import Progress


@contextmanager
def item_bar(enabled: bool, label: str, unit: str) -> Iterator[Progress | None]:
    """A transient bar on stderr (terminals only) labelled `label: current item`."""
    with count_bar(enabled, label, unit) as bar:
        if bar is None:
            yield None
            return

        def update(done: int, total: int, item: str) -> None:
            bar(f"{label}: {item}" if item else label, done, total)

        yield update
