"""`axsim figures`: regenerate the paper figures by simulation (validation/figures)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from simulator.commands.options import JOBS_HELP, json_option, progress_option
from simulator.outputs.versions import stamp
from validation.commands.progress import item_bar


def _schema() -> dict[str, Any]:
    from validation.commands.schemas import figures_schema

    return figures_schema()


def require_matplotlib() -> None:
    """Stop before any work when matplotlib is missing (the `figures` extra): one line
    with the install hint, exit 2 (it was exit 1 after every figure had failed, the
    cause only on stdout)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise click.UsageError(
            "axsim figures draws with matplotlib, which is not installed: "
            "pip install 'axsim[figures]' (in the axsim checkout: pip install -e '.[figures]')"
        ) from None


def register(app: click.Group) -> None:
    @app.command("figures")
    @click.option(
        "-o",
        "--out",
        "out_dir",
        type=click.Path(file_okay=False),
        default="figures",
        show_default=True,
        help="Directory for NAME.png, NAME.svg and NAME.md.",
    )
    @click.option("--only", default=None, help="Comma-separated figure (or family) names.")
    @click.option(
        "--reduced",
        is_flag=True,
        help="Small GPU counts and models: every figure in seconds (for tests).",
    )
    @click.option("--jobs", "-j", type=int, default=None, help=f"{JOBS_HELP} Default: the CPUs.")
    @click.option(
        "--overwrite",
        is_flag=True,
        help="Replace the --out folder of an earlier run (whole, once the new one is done).",
    )
    @click.option("--list", "list_only", is_flag=True, help="List the figures and exit.")
    @json_option("figures", _schema, "One object: files and key numbers per figure.")
    @progress_option()
    def figures_cmd(
        out_dir: str,
        only: str | None,
        reduced: bool,
        jobs: int | None,
        overwrite: bool,
        list_only: bool,
        as_json: bool,
        progress: bool,
    ) -> None:
        """Regenerate the paper figures by simulation (PNG, SVG and a caption each)."""
        from simulator.outputs.staging import check_out_folder, staged_folder
        from simulator.process import check_jobs
        from validation.experiments.runner import build_figures
        from validation.figures import select

        figures = select(only)
        if list_only:
            for f in figures:
                click.echo(f"{f.name:26s} {f.family:14s} {f.title}")
            return
        require_matplotlib()
        jobs = check_jobs(jobs)  # capped: -j 100000 started thousands of processes
        check_out_folder(out_dir, overwrite=overwrite)  # before minutes of simulations
        timings: dict[str, float] = {}
        # drawn into a staging folder that becomes --out once every figure and the
        # summary are written: an interrupted run leaves the previous folder or none
        with staged_folder(out_dir, "figures", overwrite=overwrite) as stage:
            with item_bar(progress, "figures", "figures") as bar:
                outputs, wall = build_figures(
                    figures, stage, reduced=reduced, jobs=jobs, progress=bar, timings=timings
                )
            summary = {
                "wall_time_s": wall,
                "reduced": reduced,
                "task_wall_s": dict(sorted(timings.items(), key=lambda kv: -kv[1])),
                "figures": [
                    {
                        "name": o.name,
                        "files": [str(Path(out_dir) / p.relative_to(stage)) for p in o.files],
                        "numbers": o.numbers,
                        "error": o.error,
                    }
                    for o in outputs
                ],
            }
            summary = stamp(summary)
            (stage / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        if as_json:
            click.echo(json.dumps(summary, default=str))
        else:
            for o in outputs:
                state = f"error: {o.error}" if o.error else f"{len(o.files)} files"
                click.echo(f"{o.name:26s} {state}")
            click.echo(f"{len(outputs)} figures in {wall:.1f} s -> {out_dir}/")
        failed = [o.name for o in outputs if o.error]
        if failed:
            print(f"axsim: error: figures failed: {', '.join(failed)}", file=sys.stderr)
            raise click.exceptions.Exit(1)
