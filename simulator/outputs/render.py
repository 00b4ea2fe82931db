"""Rich rendering of reports and progress (the only non-CLI module that imports rich)."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from simulator.outputs.text import printable
from simulator.units import format_bytes, format_seconds

if TYPE_CHECKING:  # annotations only: `axsim collective` renders without the engine
    from simulator.engine.core import ProgressFn
    from simulator.outputs.report import Report

PIPED_WIDTH = 160
COMPUTE_LABELS = {
    "gemm": "GEMM",
    "attention": "attention",
    "elementwise": "element-wise (norms, activations, residuals, copies)",
    "optimizer": "optimizer step",
    "launch_gaps": "launch gaps",
    "interference": "interference (beside communication)",
}


def markup_safe(text: object) -> str:
    """A name from a file as rich renders it: control characters escaped
    (`simulator.outputs.text.printable`) and markup escaped ("[/]" crashed rich)."""
    return escape(printable(text))


def stdout_console() -> Console:
    """The console for tables on stdout. A pipe or file gets PIPED_WIDTH columns (rich
    would use 80 and cut or squeeze wide tables); a terminal or $COLUMNS keeps its width."""
    console = Console()
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console = Console(width=PIPED_WIDTH)
    return console


def _pct(part: float, whole: float) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole > 0 else "  -  "


def render_report(report: Report, console: Console | None = None) -> None:
    """Print a report as rich tables."""
    c = console or stdout_console()
    g = report.grid
    grid = " x ".join(f"{k}={v}" for k, v in g.items())
    # the title stays short: a piped (80-column) console would cut a long one, and the
    # grid is what a user who let axsim pick it most needs to see
    head = (
        f"[bold]{markup_safe(report.model)}[/] on [bold]{report.gpus}[/] {report.gpu} GPUs "
        f"({markup_safe(report.machine)})"
    )
    t = report.iteration_time_s
    summary = Table.grid(padding=(0, 2))
    summary.add_column(justify="left")
    summary.add_column(justify="right")
    summary.add_row("configuration", escape(f"{report.strategy} [{grid}]"))
    summary.add_row("engine", f"{report.engine_mode} mode, {report.network_model} network")
    summary.add_row("iteration time", f"[bold]{format_seconds(t)}[/]")
    summary.add_row(
        "model FLOP/s",
        f"{report.pflops_total:.1f} PFLOP/s total, {report.tflops_per_gpu:.1f} TFLOP/s per GPU",
    )
    emp = (
        f", {report.percent_of_empirical_peak:.1f}% of empirical GEMM peak"
        if report.percent_of_empirical_peak is not None
        else ""
    )
    summary.add_row(
        "efficiency", f"{report.percent_of_advertised_peak:.1f}% of advertised peak{emp}"
    )
    fit = {
        "fits": "[green]fits[/]",
        "uncertain": f"[yellow]may not fit: {format_bytes(report.memory_lower_bytes)} at least[/]",
    }.get(report.memory_verdict, "[bold red]DOES NOT FIT[/]")
    summary.add_row(
        "memory per GPU",
        f"{format_bytes(report.memory_per_gpu_bytes)} of {format_bytes(report.memory_capacity_bytes)} ({fit})",
    )
    params = ", ".join(
        f"{k}={v}" for k, v in report.parameters.items() if k not in ("strategy", "grid")
    )
    summary.add_row("parameters", escape(params))
    kt = report.kernel_terms
    if kt:
        summary.add_row(
            "kernel model",
            escape(
                f"GEMM {kt['gemm_peak_tflops']:.0f} TFLOP/s, HBM {kt['hbm_GBps']:.0f} GB/s, "
                f"launch gap {kt['launch_gap_us']:.1f} us, interference "
                + _interference_text(kt)
                + (" (calibrated)" if kt.get("calibrated") else "")
            ),
        )
    c.print(Panel(summary, title=head, expand=False))

    time_table = Table(title=f"Where the time goes (rank {report.critical_rank})", show_lines=False)
    time_table.add_column("component")
    time_table.add_column("time", justify="right")
    time_table.add_column("of iteration", justify="right")
    time_table.add_row(
        "compute", format_seconds(report.compute_time_s), _pct(report.compute_time_s, t)
    )
    for kind, v in sorted(report.compute_by_kind_s.items(), key=lambda kv: -kv[1]):
        time_table.add_row(f"  {COMPUTE_LABELS.get(kind, kind)}", format_seconds(v), _pct(v, t))
    if report.host_bound_s > 0:
        time_table.add_row(
            "waiting for the host (launch-bound)",
            format_seconds(report.host_bound_s),
            _pct(report.host_bound_s, t),
        )
    time_table.add_row(
        "exposed communication",
        format_seconds(report.exposed_comm_time_s),
        _pct(report.exposed_comm_time_s, t),
    )
    native = report.comm_time_by_native_group_s
    by_group = native if native else report.comm_time_by_group_s
    totals = report.comm_total_by_native_group_s if native else report.comm_total_by_group_s
    for group, v in by_group.items():
        total = totals.get(group, 0.0)
        axis = report.group_axes.get(group, group)
        label = group if axis == group else f"{group} (axis {axis})"
        time_table.add_row(
            f"  {label} (exposed / in flight)",
            f"{format_seconds(v)} / {format_seconds(total)}",
            _pct(v, t),
        )
    time_table.add_row(
        "overlapped communication",
        format_seconds(report.overlapped_comm_time_s),
        _pct(report.overlapped_comm_time_s, t),
    )
    c.print(time_table)
    if report.stages:
        c.print(stage_table(report))

    if report.busiest_links:
        links = Table(title="Busiest links")
        for col in ("link", "kind", "GB/s", "bytes", "utilisation"):
            links.add_column(col, justify="right" if col != "link" else "left")
        for u in report.busiest_links:
            links.add_row(
                markup_safe(f"{u.src} -> {u.dst}"),  # device names of a custom file
                u.kind,
                f"{u.bandwidth_GBps:g}",
                format_bytes(u.bytes),
                f"{100 * u.utilization:.1f}%",
            )
        c.print(links)
    if report.choices:
        c.print("[bold]Chosen automatically[/]")
        for ch in report.choices:
            c.print(
                f"  {escape(ch['what'])} [bold]{escape(ch['value'])}[/]: {escape(ch['reason'])}"
            )
    c.print(
        f"[dim]simulated {report.ops_simulated:,} of {report.ops_represented:,} ops "
        f"({report.skipped_segments} repeated microbatches copied), {report.events:,} events, "
        f"wall time {report.wall_time_s:.2f} s[/]"
    )


def stage_table(report: Report) -> Table:
    """One row per pipeline stage: its layers, load, waits and memory."""
    t = report.iteration_time_s
    table = Table(title="Pipeline stages (first rank of each)")
    for col in ("stage", "layers", "compute", "load", "exposed comm", "pipeline wait", "memory"):
        table.add_column(col, justify="left" if col == "stage" else "right")
    for row in report.stages:
        extra = "+".join(x for x, on in (("embedding", row.embedding), ("loss", row.head)) if on)
        table.add_row(
            f"{row.stage}" + (f" ({extra})" if extra else ""),
            str(row.layers),
            format_seconds(row.compute_s),
            f"{100 * row.load:.0f}%",
            format_seconds(row.exposed_comm_s),
            f"{format_seconds(row.pipeline_wait_s)} ({_pct(row.pipeline_wait_s, t).strip()})",
            format_bytes(row.memory_bytes),
        )
    return table


@contextmanager
def progress_bar(enabled: bool) -> Iterator[ProgressFn | None]:
    """A transient rich progress bar on stderr (ops done, simulated time)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]simulating"),
        BarColumn(),
        TextColumn("{task.completed:,.0f}/{task.total:,.0f} ops"),
        TextColumn("t_sim={task.fields[t]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as bar:
        task = bar.add_task("sim", total=1, t="0 s")

        def update(done: int, total: int, sim_s: float) -> None:
            bar.update(task, completed=done, total=max(total, 1), t=format_seconds(sim_s))

        yield update


CountFn = Callable[[str, int, int], None]
"""count(description, done, total)."""


@contextmanager
def count_bar(enabled: bool, label: str, unit: str) -> Iterator[CountFn | None]:
    """A transient rich progress bar on stderr counting finished items (terminals only)."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} " + unit),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=1)

        def update(description: str, done: int, total: int) -> None:
            bar.update(task, description=description, completed=done, total=max(total, 1))

        yield update


def _interference_text(kt: dict[str, object]) -> str:
    """How overlap stretches compute: fixed factors, or the mechanism's terms."""
    c, m = kt.get("interference_compute"), kt.get("interference_memory")
    if isinstance(c, int | float) and isinstance(m, int | float):
        return f"x{c:.2f} / x{m:.2f}"
    mech = kt.get("interference")
    if isinstance(mech, dict) and isinstance(mech.get("mechanism"), dict):
        d = mech["mechanism"]
        ch = d.get("ring_channels") or {}
        chans = "/".join(str(v) for v in ch.values()) if isinstance(ch, dict) else "?"
        return f"{d.get('library')} {chans} blocks of {d.get('sm_count')} SMs/CUs"
    return "none"
