"""`axsim sweep`: simulate the cartesian product of config axes (simulator/sweep)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from simulator.commands.options import JOBS_HELP, progress_option, set_option
from simulator.commands.params import FiniteFloat
from simulator.sweep import Progress


@contextmanager
def _progress_bar(enabled: bool) -> Iterator[Progress | None]:
    """A rich progress bar on stderr (rows done / total, failures, elapsed, ETA)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as Bar

    with Bar(
        TextColumn("[bold]sweep"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("[red]{task.fields[failed]} failed"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task("sweep", total=1, failed=0)
        failed = 0

        def update(done: int, total: int, row: dict[str, Any] | None) -> None:
            nonlocal failed
            failed += row is not None and row.get("status") != "ok"
            bar.update(task, completed=done, total=max(total, 1), failed=failed)

        yield update


def register(app: click.Group) -> None:
    @app.command("sweep")
    @click.argument("spec", type=click.Path(dir_okay=False))
    @click.option(
        "--jobs", "-j", type=int, default=1, show_default=True, help=f"{JOBS_HELP} Local ones."
    )
    @click.option(
        "--dask-scheduler",
        default=None,
        metavar="tcp://HOST:PORT",
        help="Run on an existing dask.distributed scheduler.",
    )
    @click.option(
        "--dask-local",
        type=int,
        default=None,
        metavar="N",
        help="Start a dask LocalCluster of N workers for this sweep.",
    )
    @click.option(
        "--dask-timeout",
        # a day at most: a larger wait is a typo (1e308 overflowed the thread's deadline)
        type=FiniteFloat(min=0.0, min_open=True, max=86400.0),
        default=10.0,
        show_default=True,
        help="Seconds to wait for --dask-scheduler.",
    )
    @click.option(
        "-o",
        "--out",
        "out_dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Output directory (default: <spec name>-sweep/).",
    )
    @click.option(
        "--format",
        "fmt",
        type=click.Choice(("csv", "parquet")),
        default="csv",
        show_default=True,
        help="Table format (rows.jsonl is always written).",
    )
    @click.option(
        "--retry-failed", is_flag=True, help="Recompute points whose journalled row is an error."
    )
    @set_option("Applied to the spec's base after its own set (not an axis).")
    @progress_option()
    def sweep_cmd(
        spec: str,
        jobs: int,
        dask_scheduler: str | None,
        dask_local: int | None,
        dask_timeout: float,
        out_dir: str | None,
        fmt: str,
        retry_failed: bool,
        sets: tuple[str, ...],
        progress: bool,
    ) -> None:
        """Simulate every combination of the spec's axes; one row per point, resumable.

        SPEC is a YAML file with `base` (default, a config path or an inline config),
        optional `set` (fixed dotted overrides) and `axes` (dotted key -> list of values).
        Each row of rows.jsonl follows `axsim schema --output sweep-row`.
        """
        from simulator.sweep import load_spec, run_sweep, with_overrides

        parsed = with_overrides(load_spec(spec), sets)
        out = Path(out_dir) if out_dir else Path(f"{Path(spec).stem}-sweep")
        with _progress_bar(progress) as bar:
            res = run_sweep(
                parsed,
                out,
                jobs=jobs,
                fmt=fmt,
                dask_scheduler=dask_scheduler,
                dask_local=dask_local,
                dask_timeout_s=dask_timeout,
                retry_failed=retry_failed,
                progress=bar,
            )
        if res.damaged:
            more = f" (and {len(res.damaged) - 1} more)" if len(res.damaged) > 1 else ""
            print(
                f"axsim sweep: warning: {len(res.damaged)} damaged line(s) of {res.journal} "
                f"moved to {res.quarantine}: {res.damaged[0]}{more}; the good rows were kept",
                file=sys.stderr,
            )
        dup = f", {res.points - res.distinct} duplicate" if res.points > res.distinct else ""
        print(
            f"axsim sweep: {res.distinct} configs{dup}: {res.already_done} already done, "
            f"{res.ran} run ({res.failed} failed) in {res.wall_time_s:.1f} s -> {res.table}",
            file=sys.stderr,
        )
