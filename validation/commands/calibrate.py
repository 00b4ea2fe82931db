"""`axsim calibrate INPUT... -o FILE`: fit a calibration file from traces and benchmarks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from simulator.commands.params import FiniteFloat
from simulator.cost.calibration import Calibration
from simulator.schema import stamp


def _summary(cal: Calibration) -> dict[str, Any]:
    """What the file holds, per GPU, plus the worst collective residual."""
    out: dict[str, Any] = {}
    res = cal.provenance.residuals.get("collectives", {})
    for gpu, g in cal.gpus.items():
        worst = [
            v.get("max_rel_error", 0.0)
            for k, v in res.items()
            if k.startswith(f"{gpu}/") and isinstance(v, dict)
        ]
        out[gpu] = {
            "gemm_shapes": len(g.gemm.points) if g.gemm else 0,
            "collective_tables": len(g.collectives),
            "max_collective_rel_error": max(worst, default=None),
            "overlap_slowdown": g.overlap_slowdown,
            "interference": g.interference.model_dump(exclude_none=True)
            if g.interference
            else None,
            "rates": g.rates.model_dump(exclude_none=True) if g.rates else None,
        }
    return out


@click.command("calibrate")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path),
    help="Calibration file to write (.yaml, or .json); required unless --leave-one-out.",
)  # fmt: skip
@click.option("--gpu", default=None, help="GPU type of every input (catalogue name).")
@click.option(
    "--tolerance", type=FiniteFloat(min=0.001, max=1.0), default=0.03, show_default=True,
    help="Largest relative error of a measured size from its alpha-beta segment.",
)  # fmt: skip
@click.option(
    "--statistic", type=click.Choice(["auto", "median", "mean"]), default="auto",
    show_default=True, help="Per shape/size statistic (auto: mean on a CPU host, else median).",
)  # fmt: skip
@click.option("--gpus-per-node", type=click.IntRange(min=1), help="GPUs per node of traced runs.")
@click.option(
    "--host-terms/--no-host-terms", default=True, show_default=True,
    help="gloo runs: add host overhead and arrival jitter to the collective tables.",
)  # fmt: skip
@click.option(
    "--leave-one-out", "leave_one_out", is_flag=True,
    help="Check the kernel model instead of writing a file: each INPUT (a GPU trace, or a "
    "directory of one run's traces) predicted by the model calibrated on the others.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def calibrate_command(
    inputs: tuple[Path, ...],
    out: Path | None,
    gpu: str | None,
    tolerance: float,
    statistic: str,
    gpus_per_node: int | None,
    host_terms: bool,
    leave_one_out: bool,
    as_json: bool,
) -> None:
    """Fit GEMM tables, collective alpha-beta tables, kernel-model rates and interference
    from Kineto traces (files or run directories) and Vidur collective benchmark CSVs."""
    from simulator.errors import ConfigError
    from validation.calibrate import calibrate, write_calibration

    if gpu is not None:
        from topologies.hardware import gpu_spec

        gpu = gpu_spec(gpu).name
    if leave_one_out:
        from validation.commands.kernel_check import run_leave_one_out

        run_leave_one_out(list(inputs), gpu, as_json)
        return
    if out is None:
        raise ConfigError("--out: give the calibration file to write (or --leave-one-out)")
    cal = calibrate(
        list(inputs), gpu=gpu, tolerance=tolerance, statistic=statistic,  # type: ignore[arg-type]
        gpus_per_node=gpus_per_node, host_terms=host_terms,
    )  # fmt: skip
    write_calibration(cal, out)
    summary = _summary(cal)
    if as_json:
        click.echo(json.dumps(stamp({"out": str(out), "gpus": summary}), indent=2, default=str))
        return
    for name, s in summary.items():
        err = s["max_collective_rel_error"]
        click.echo(
            f"{name}: {s['gemm_shapes']} GEMM shapes, {s['collective_tables']} collective "
            f"tables"
            + (f" (max residual {err:.1%})" if err is not None else "")
            + (f", overlap slowdown {s['overlap_slowdown']:.3f}" if s["overlap_slowdown"] else "")
            + (f", interference {s['interference']}" if s["interference"] else "")
            + (f", rates {', '.join(sorted(s['rates']))}" if s["rates"] else "")
        )
    click.echo(f"wrote {out}")


def register(app: click.Group) -> None:
    """Add `calibrate` to the axsim command group."""
    app.add_command(calibrate_command)
