"""`axsim bench`: the scaling benchmark (wall time, peak RSS, events/s vs raw simpy)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import click

from simulator.atomic import atomic_write_text
from simulator.outputs.versions import stamp


def register(app: click.Group) -> None:
    @app.command("bench")
    @click.option("--quick", is_flag=True, help="Only the smallest symmetric and full cases.")
    @click.option("--only", default=None, help="Run only cases whose name contains this text.")
    @click.option(
        "-o",
        "--out",
        "out_file",
        type=click.Path(dir_okay=False),
        default="bench-results.json",
        show_default=True,
        help="JSON file for the results.",
    )
    def bench_cmd(quick: bool, only: str | None, out_file: str) -> None:
        """Measure the engine on the scaling cases (each case in its own process)."""
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        from simulator.outputs.render import stdout_console
        from simulator.trials.scaling import default_cases, run_bench

        cases = default_cases(quick)
        if only is not None:
            if not only.strip():
                raise click.BadParameter("give the text of a case name", param_hint="--only")
            known = ", ".join(c.name for c in cases)
            cases = [c for c in cases if only.lower() in c.name.lower()]
            if not cases:
                raise click.BadParameter(
                    f"no bench case name contains {only!r} (cases: {known})", param_hint="--only"
                )
        console = Console(stderr=True)

        def show(row: dict[str, Any]) -> None:
            if "error" in row:
                console.print(f"[red]{escape(row['name'])}: {escape(row['error'])}[/]")
            else:
                console.print(
                    f"{escape(row['name'])}: {row['wall_time_s']:.2f} s, {int(row['peak_rss_bytes']) / 2**30:.2f} GiB"
                )

        folder = Path(out_file).resolve().parent  # fail before minutes of benchmarks, not after
        if not folder.is_dir() or not os.access(folder, os.W_OK):
            raise click.BadParameter(f"{out_file}: cannot write a file there", param_hint="--out")
        result = run_bench(cases, show)
        try:  # renamed into place: an interrupted write leaves the previous file whole
            atomic_write_text(out_file, json.dumps(stamp(dict(result)), indent=2))
        except OSError as e:
            raise click.BadParameter(
                f"{out_file}: cannot write ({e.strerror})", param_hint="--out"
            ) from None
        table = Table(
            title=f"axsim bench (raw simpy: {result['raw_simpy_events_per_s']:,.0f} events/s)"
        )
        for col in (
            "case",
            "wall (s)",
            "peak RSS (GiB)",
            "events",
            "events/s",
            "x raw simpy",
            "ops simulated / represented",
            "kernel model",
            "target",
        ):
            if col == "case":
                table.add_column(col, justify="left", no_wrap=True)
            else:
                table.add_column(col, justify="right")
        for r in result["cases"]:
            if "error" in r:
                table.add_row(
                    escape(r["name"]),
                    "error",
                    escape(r["error"]),
                    "",
                    "",
                    "",
                    "",
                    "",
                    r.get("target", ""),
                )
                continue
            km = float(r.get("kernel_model_s", 0.0))
            table.add_row(
                escape(r["name"]),
                f"{r['wall_time_s']:.2f}",
                f"{r['peak_rss_bytes'] / 2**30:.2f}",
                f"{r['events']:,}",
                f"{r['events_per_s']:,.0f}",
                f"{r['ratio_to_raw_simpy']:.2f}",
                f"{r['ops_simulated']:,} / {r['ops_represented']:,}",
                f"{km:.2f} s ({100 * km / r['wall_time_s']:.1f}%)",
                r.get("target", ""),
            )
        stdout_console().print(table)
        click.echo(f"results written to {out_file}")
