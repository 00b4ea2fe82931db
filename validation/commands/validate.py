"""`axsim validate`: every published number the repo holds, simulated and compared.

Exit status: 0 when every case is within its tolerance, 1 when one is not (or its
simulation failed), 2 for bad input (an unknown case name).
"""

from __future__ import annotations

import json
from typing import Any

import click

from simulator.commands.options import JOBS_HELP, json_option, progress_option
from simulator.outputs.versions import SCHEMA_VERSION, axsim_version
from validation.cases.case import CaseResult
from validation.commands.progress import item_bar

STYLE = {"ok": "green", "outside": "bold red", "failed": "bold red", "info": "yellow"}


def _num(v: float | None, digits: int = 4) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def render(results: list[CaseResult], wall: float, reduced: bool) -> None:
    """The comparison table on stdout, then one line per case's detail."""
    from rich.markup import escape
    from rich.table import Table

    from simulator.outputs.render import stdout_console

    table = Table(
        title="axsim validate: published vs simulated" + (" (reduced)" if reduced else "")
    )
    for col in (
        "case",
        "quantity",
        "published",
        "simulated",
        "error %",
        "tolerance",
        "status",
        "role",
        "source",
    ):
        table.add_column(
            col,
            justify="right"
            if col in ("published", "simulated", "error %", "tolerance")
            else "left",
        )
    for r in results:
        c = r.case
        err = "-" if r.error_pct is None else f"{r.error_pct:+.1f}"
        tol = c.tolerance_text
        table.add_row(
            c.name,
            escape(c.quantity),
            f"{'<= ' if c.bound else ''}{_num(c.published)} {c.unit}",
            f"{_num(r.simulated)} {c.unit}",
            err,
            tol,
            f"[{STYLE[r.status]}]{r.status}[/]",
            c.role,
            escape(c.cite),
        )
    console = stdout_console()
    console.print(table)
    for r in results:
        console.print(f"[dim]{escape(r.case.name)}: {escape(r.detail)}[/]")
    bad = sum(r.status in ("outside", "failed") for r in results)
    console.print(f"{len(results)} cases, {bad} outside tolerance, in {wall:.1f} s")


def _schema() -> dict[str, Any]:
    from validation.commands.schemas import validate_schema

    return validate_schema()


def register(app: click.Group) -> None:
    @app.command("validate")
    @click.option(
        "--only", default=None, help="Comma-separated case names or prefixes (e.g. perlmutter,bw-)."
    )
    @click.option(
        "--reduced",
        is_flag=True,
        help="Simulate only the analytical model's best grid for AxoNN cases (fast).",
    )
    @click.option("--jobs", "-j", type=int, default=None, help=f"{JOBS_HELP} Default: the CPUs.")
    @click.option("--list", "list_only", is_flag=True, help="List the cases and exit.")
    @json_option("validate", _schema, "One object: the cases and the wall time.")
    @progress_option()
    def validate_cmd(
        only: str | None,
        reduced: bool,
        jobs: int | None,
        list_only: bool,
        as_json: bool,
        progress: bool,
    ) -> None:
        """Simulate every published number the repo holds and compare (exit 1 if any is
        outside its tolerance)."""
        from simulator.process import check_jobs
        from validation.cases.validate import run_validation, select_cases

        cases = select_cases(only)
        if list_only:
            for c in cases:
                pub = "-" if c.published is None else f"{c.published:g}"
                click.echo(f"{c.name:34s} {pub} {c.unit} ({c.tolerance_text}) {c.cite}")
            return
        jobs = check_jobs(jobs)  # capped: -j 100000 started thousands of processes
        with item_bar(progress, "validate", "cases") as bar:
            results, wall = run_validation(cases, reduced=reduced, jobs=jobs, progress=bar)
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "schema_version": SCHEMA_VERSION,
                        "axsim_version": axsim_version(),
                        "wall_time_s": wall,
                        "reduced": reduced,
                        "cases": [r.as_dict() for r in results],
                    },
                    default=str,
                )
            )
        else:
            render(results, wall, reduced)
        if any(r.status in ("outside", "failed") for r in results):
            raise click.exceptions.Exit(1)
