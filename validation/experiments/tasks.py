"""The figure framework's vocabulary: tasks (simulations to run), figures, outputs.

A figure is two functions: `tasks(reduced)` lists the simulations it needs (calls of
validation/experiments/simulations.py by name with JSON-able arguments) and
`render(built, out_dir, reduced)` draws the results and writes PNG, SVG and a caption.
Tasks are identified by their call (`Task.key`), so figures that need the same
simulation share one run, and the runner can spread the work over processes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Task:
    """One call of an experiment function; `deps` are keys of tasks whose results it takes."""

    fn: str
    kwargs_json: str
    deps: tuple[str, ...] = ()
    label: str = ""

    @property
    def key(self) -> str:
        return f"{self.fn}:{self.kwargs_json}"

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(json.loads(self.kwargs_json))


def task(fn: str, *, deps: Sequence[Task] = (), label: str = "", **kwargs: Any) -> Task:
    """A task calling `experiments.<fn>(**kwargs)`, or `module:function` for functions
    elsewhere (after the tasks in `deps`)."""
    return Task(fn, json.dumps(kwargs, sort_keys=True), tuple(d.key for d in deps), label)


Built = list[tuple[Task, Any]]
"""A figure's tasks with their results, in the order `tasks()` listed them."""


@dataclass
class FigureOutput:
    """What one figure produced: files, its caption and the key simulated numbers."""

    name: str
    files: list[Path] = field(default_factory=list)
    caption: str = ""
    numbers: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


@dataclass(frozen=True)
class Figure:
    """A figure: its name (the `--only` key), family, title, tasks and renderer."""

    name: str
    family: str
    title: str
    tasks: Callable[[bool], list[Task]]
    render: Callable[[Built, Path, bool], FigureOutput]
