"""`axsim compare --traces DIR [--config CONFIG]`: measured vs simulated, per iteration,
op kind and process group; exit code 3 when the iteration time is beyond tolerance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from simulator.commands.options import json_option, machine_option, set_option
from simulator.commands.params import NETWORK_HELP, NON_NEGATIVE
from simulator.outputs.versions import stamp

EXIT_BEYOND_TOLERANCE = 3


def _schema() -> dict[str, Any]:
    from validation.commands.schemas import compare_schema

    return compare_schema()


def _fmt(x: float | None, scale: float = 1e3) -> str:
    return "-" if x is None else f"{x * scale:.3f}"


@click.command("compare")
@click.option(
    "--traces", required=True, type=click.Path(path_type=Path),
    help="Folder with one trace per rank (and torch4d's run.json).",
)  # fmt: skip
@click.option(
    "--config", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="axsim YAML config, or a torch4d run.json (default: TRACES/run.json).",
)  # fmt: skip
@click.option(
    "--calibration", type=click.Path(dir_okay=False, path_type=Path), default=None,
    help="Calibration file (from `axsim calibrate`) for the simulated run.",
)  # fmt: skip
@click.option(
    "--tolerance", type=NON_NEGATIVE, default=0.2, show_default=True,
    help="Relative error of the iteration time beyond which the exit code is 3 "
    "(the per-kind and per-group rows are reported, never judged).",
)  # fmt: skip
@machine_option("Here: the machine of a GPU run.json.")
@click.option(
    "--network", type=click.Choice(["contention", "alpha-beta"]), default="contention",
    show_default=True, help=NETWORK_HELP,
)  # fmt: skip
@set_option("Here: of a YAML --config (a run.json replays as traced).")
@json_option("compare", _schema, "One object: the rows and the verdict.")
def compare_command(
    traces: Path,
    config: Path | None,
    calibration: Path | None,
    tolerance: float,
    machine: str | None,
    network: str,
    sets: tuple[str, ...],
    as_json: bool,
) -> int:
    """Simulate the traced run and print measured vs simulated (error %)."""
    from simulator.outputs.text import printable
    from validation.compare import compare

    result = compare(traces, config, calibration, tolerance, machine, network, sets)
    code = 0 if result.passed else EXIT_BEYOND_TOLERANCE
    if as_json:
        click.echo(json.dumps(stamp(result.to_json()), indent=2))
        return code
    click.echo(f"{'scope':<10} {'name':<16} {'measured ms':>12} {'simulated ms':>13} {'error':>8}")
    for r in result.rows:
        err = "-" if r.error is None else f"{r.error:+.1%}"
        click.echo(
            f"{r.scope:<10} {printable(r.name):<16} {_fmt(r.measured_s):>12} {_fmt(r.simulated_s):>13} {err:>8}"
        )
    steps = ", ".join(f"{s * 1e3:.1f}" for s in result.measured_steps_s)
    verdict = "within" if result.passed else "BEYOND"
    click.echo(f"measured steps (ms): {steps}; iteration {verdict} tolerance {tolerance:.0%}")
    return code


def register(app: click.Group) -> None:
    """Add `compare` to the axsim command group."""
    app.add_command(compare_command)
