"""`axsim calibrate --leave-one-out INPUT...`: the kernel model's leave-one-trace-out table."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.table import Table

from simulator.outputs.render import stdout_console
from validation.calibration.kernels.leave_one_out import (
    ROWS,
    TOLERANCE,
    LooRow,
    leave_one_out,
    load_case,
)

COLUMNS = (*ROWS, "compute")


def _cell(row: LooRow, col: str) -> str:
    m, p = row.measured.get(col, 0.0), row.predicted.get(col, 0.0)
    if m <= 0 and p <= 0:
        return "-"
    err = row.error(col)
    mark = (
        "" if err is None else f" {err:+.0%}" if abs(err) <= TOLERANCE else f" [red]{err:+.0%}[/]"
    )
    return f"{m * 1e3:.2f} / {p * 1e3:.2f}{mark}"


def run_leave_one_out(inputs: list[Path], gpu: str | None, as_json: bool) -> None:
    """Load each input as one case, run the leave-one-out and print the table."""
    if len(inputs) < 2:
        from simulator.errors import ConfigError

        raise ConfigError("--leave-one-out needs at least two inputs (one to hold out)")
    rows = leave_one_out([load_case(p, gpu) for p in inputs])
    if as_json:
        from simulator.outputs.versions import stamp

        click.echo(json.dumps(stamp({"tolerance": TOLERANCE, "cases": [
            {"case": r.label, "gpu": r.gpu, "coverage": r.coverage,
             "own_gpu_evidence": r.own_gpu_evidence, "gemm_peak_rule": r.gemm_peak_rule,
             "measured_s": r.measured, "predicted_s": r.predicted,
             "error": {c: r.error(c) for c in COLUMNS}} for r in rows
        ]}), indent=2))  # fmt: skip
        return
    table = Table(title="Kernel model, leave one trace out: measured / predicted ms (error)")
    table.add_column("case")
    table.add_column("gpu")
    table.add_column("coverage", justify="right")
    for col in COLUMNS:
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r.label, r.gpu, f"{r.coverage:.0%}", *(_cell(r, c) for c in COLUMNS))
    console = stdout_console()
    console.print(table)
    console.print(
        "[dim]coverage: share of the case's kernel time whose work the trace records (the "
        f"rest no model can price); errors beyond {TOLERANCE:.0%} in red[/]"
    )
