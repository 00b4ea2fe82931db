"""Run the tasks of the selected figures (deduplicated, in processes) and render them.

Tasks start as soon as the tasks they depend on are done; with `jobs` > 1 they run in a
process pool (simulations are CPU-bound and hold the GIL). A failing task fails only the figures that need it: the others
are still drawn, and the failure is reported as that figure's error. Ready tasks are
submitted largest machine first, so the long simulations do not end up last.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from validation.figures.base import Figure, FigureOutput, Task

Progress = Callable[[int, int, str], None]
"""progress(tasks done, tasks in total, label of the task just finished)."""


class TaskFailed:
    """The result slot of a task that raised: its error text."""

    def __init__(self, message: str) -> None:
        self.message = message


def run_task(fn: str, kwargs: dict[str, Any], deps: dict[str, Any]) -> tuple[Any, float]:
    """Call `experiments.<fn>` (or `package.module:function`): (result, wall seconds).
    Runs in worker processes."""
    from importlib import import_module

    t0 = time.perf_counter()
    module, _, name = fn.rpartition(":")
    func = getattr(import_module(module or "validation.figures.experiments"), name)
    try:
        res = func(**kwargs, deps=deps) if deps else func(**kwargs)
    except Exception as e:  # reported per figure, never a crash of the whole build
        res = TaskFailed(f"{fn}({kwargs}): {type(e).__name__}: {e}")
    return res, time.perf_counter() - t0


def run_tasks(
    tasks: Sequence[Task],
    jobs: int = 1,
    progress: Progress | None = None,
    timings: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Results by task key; identical tasks run once. `timings` (if given) receives each
    task's wall seconds by label."""
    unique = {t.key: t for t in tasks}
    results: dict[str, Any] = {}
    total = len(unique)

    def deps_of(t: Task) -> dict[str, Any]:
        return {k: results[k] for k in t.deps}

    def finished(t: Task, outcome: tuple[Any, float]) -> None:
        results[t.key] = outcome[0]
        if timings is not None:
            timings[t.label or t.key] = outcome[1]
        if progress:
            progress(len(results), total, t.label or t.fn)

    def ready_tasks() -> list[Task]:
        out = [t for t in pending.values() if all(k in results for k in t.deps)]
        return sorted(out, key=lambda t: -_size(t))

    missing = {k for t in unique.values() for k in t.deps} - set(unique)
    if missing:
        raise ValueError(f"figure tasks depend on tasks not listed: {sorted(missing)[0]}")

    pending = dict(unique)
    if jobs <= 1:
        while pending:
            t = ready_tasks()[0]
            del pending[t.key]
            finished(t, _call(t, deps_of(t)))
        return results
    from simulator.process import worker_pool

    with worker_pool(min(jobs, total), "the figure tasks") as pool:
        running: dict[Future[Any], Task] = {}
        while pending or running:
            for t in ready_tasks():
                del pending[t.key]
                if any(isinstance(v, TaskFailed) for v in deps_of(t).values()):
                    finished(t, (TaskFailed(f"{t.fn}: a task it depends on failed"), 0.0))
                    continue
                running[pool.submit(run_task, t.fn, t.kwargs, deps_of(t))] = t
            if not running:
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in done:
                finished(running.pop(f), f.result())
    return results


def _size(t: Task) -> int:
    """GPUs a task simulates (a proxy for its cost)."""
    kw = t.kwargs
    return int(kw.get("gpus") or 8 * int(kw.get("nodes") or 0))


def _call(t: Task, deps: dict[str, Any]) -> tuple[Any, float]:
    if any(isinstance(v, TaskFailed) for v in deps.values()):
        return TaskFailed(f"{t.fn}: a task it depends on failed"), 0.0
    return run_task(t.fn, t.kwargs, deps)


def build_figures(
    figures: Sequence[Figure],
    out_dir: Path,
    *,
    reduced: bool = False,
    jobs: int = 1,
    progress: Progress | None = None,
    timings: dict[str, float] | None = None,
) -> tuple[list[FigureOutput], float]:
    """Simulate and draw `figures` into `out_dir`; returns the outputs and wall time
    (`timings` receives each simulation task's wall seconds)."""
    t0 = time.perf_counter()
    planned = [(f, f.tasks(reduced)) for f in figures]
    results = run_tasks([t for _, ts in planned for t in ts], jobs, progress, timings)
    outputs = []
    for fig, ts in planned:
        failed = [results[t.key] for t in ts if isinstance(results[t.key], TaskFailed)]
        if failed:
            outputs.append(FigureOutput(fig.name, error=failed[0].message))
            continue
        try:
            outputs.append(fig.render([(t, results[t.key]) for t in ts], out_dir, reduced))
        except Exception as e:  # one broken renderer must not lose the other figures
            outputs.append(FigureOutput(fig.name, error=f"render: {type(e).__name__}: {e}"))
    return outputs, time.perf_counter() - t0
