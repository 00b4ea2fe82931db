"""`axsim calibrate INPUT... -o FILE`: fit a calibration file from traces and benchmarks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from simulator.commands.options import GPU_HELP, json_option, machine_option
from simulator.commands.params import FiniteFloat
from simulator.cost.calibration import Calibration
from simulator.outputs.versions import stamp


def _schema() -> dict[str, Any]:
    from validation.commands.schemas import calibrate_schema

    return calibrate_schema()


def _summary(cal: Calibration) -> dict[str, Any]:
    """What the file holds, per GPU, plus the worst collective residual and the network
    model's fit errors."""
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
            "network_fit": dict(g.network.fit) if g.network else None,
        }
    return out


def _network_line(fit: dict[str, Any] | None) -> str:
    if not fit:
        return ""
    return (
        f", network model fitted on {fit.get('samples')} collectives (median error "
        f"{fit.get('median_rel_error', 0):.1%}, p90 {fit.get('p90_rel_error', 0):.1%})"
    )


@click.command("calibrate")
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "-o", "--out", "out", type=click.Path(dir_okay=False, path_type=Path),
    help="Calibration file to write (.yaml, or .json); required unless --leave-one-out.",
)  # fmt: skip
@click.option("--gpu", default=None, help=f"{GPU_HELP} Here: the GPU of every input.")
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
@machine_option("Here: the machine of nccl-tests logs; for PCCL-shaped CSVs, fit only its rows.")
@click.option(
    "--log-ranks", type=click.IntRange(min=2), default=None,
    help="Ranks of a nccl-tests log without 'Rank ... on HOST' lines.",
)  # fmt: skip
@click.option(
    "--log-nodes", type=click.IntRange(min=1), default=None,
    help="Nodes of a nccl-tests log without 'Rank ... on HOST' lines.",
)  # fmt: skip
@click.option("--op", default=None, help="Collective of a nccl-tests log that does not name it.")
@click.option(
    "--fit-ranks", default=None,
    help="Fit the network model on these rank counts only (comma-separated, e.g. 8,256).",
)  # fmt: skip
@click.option(
    "--min-bytes", default="0", show_default=True,
    help="Fit the network model on messages of at least this size (e.g. 1M).",
)  # fmt: skip
@click.option(
    "--leave-one-out", "leave_one_out", is_flag=True,
    help="Check the kernel model instead of writing a file: each INPUT (a GPU trace, or a "
    "directory of one run's traces) predicted by the model calibrated on the others.",
)  # fmt: skip
@json_option("calibrate", _schema, "One object: the file's summary (or the leave-one-out cases).")
def calibrate_command(
    inputs: tuple[Path, ...],
    out: Path | None,
    gpu: str | None,
    tolerance: float,
    statistic: str,
    gpus_per_node: int | None,
    host_terms: bool,
    machine: str | None,
    log_ranks: int | None,
    log_nodes: int | None,
    op: str | None,
    fit_ranks: str | None,
    min_bytes: str,
    leave_one_out: bool,
    as_json: bool,
) -> None:
    """Fit GEMM tables, collective alpha-beta tables, kernel-model rates and interference
    from Kineto traces (files or run directories) and Vidur collective benchmark CSVs, and
    the network model's per-tier, per-protocol latency and bandwidth terms from nccl-tests
    / rccl-tests logs and PCCL-shaped CSVs."""
    from simulator.errors import ConfigError
    from validation.calibration.calibrate import calibrate, write_calibration

    if gpu is not None:
        from topologies.hardware import gpu_spec

        gpu = gpu_spec(gpu).name
    if leave_one_out:
        from validation.commands.kernel_check import run_leave_one_out

        run_leave_one_out(list(inputs), gpu, as_json)
        return
    if out is None:
        raise ConfigError("--out: give the calibration file to write (or --leave-one-out)")
    _refuse_overwriting_inputs(out, inputs)
    cal = calibrate(
        list(inputs), gpu=gpu, tolerance=tolerance, statistic=statistic,  # type: ignore[arg-type]
        gpus_per_node=gpus_per_node, host_terms=host_terms,
        logs=_log_options(machine, log_ranks, log_nodes, op, fit_ranks, min_bytes),
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
            + _network_line(s["network_fit"])
        )
    click.echo(f"wrote {out}")


def _refuse_overwriting_inputs(out: Path, inputs: tuple[Path, ...]) -> None:
    """Writing the fit over its own measurements would destroy them (`calibrate X.csv -o
    X.csv` replaced a benchmark table; `calibrate d/ -o d/m.csv` and a hard link to an
    input did too): `out` may be no file an input names or holds, by path or by inode."""
    from simulator.errors import ConfigError

    try:
        target = out.stat()
    except OSError:  # absent (or unreadable: the write says why): then compare paths
        target = None
    for item in inputs:
        try:
            files = sorted(item.iterdir()) if item.is_dir() else [item]
        except OSError:
            continue  # the reader names an unreadable input
        for f in files:
            same = out.absolute() == f.absolute()
            if target is not None and not same:
                try:
                    st = f.stat()
                except OSError:
                    continue
                same = (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino)
            if same:
                raise ConfigError(
                    f"--out {out} is the input {f}; writing the calibration would replace a "
                    "measurement (choose another file)"
                )


def _log_options(
    machine: str | None,
    ranks: int | None,
    nodes: int | None,
    op: str | None,
    fit_ranks: str | None,
    min_bytes: str,
) -> Any:
    """The flags about collective logs, checked (ConfigError naming the flag)."""
    from simulator.errors import ConfigError
    from simulator.units import parse_bytes, split_names
    from validation.calibration.calibrate import LogOptions
    from workloads.ops import CollectiveKind

    if machine is not None:
        from topologies.catalogue import machine_preset

        machine = machine_preset(machine).name
    kind = None
    if op is not None:
        try:
            kind = CollectiveKind(op)
        except ValueError:
            known = ", ".join(k.value for k in CollectiveKind)
            raise ConfigError(f"--op '{op}' unknown (use one of {known})") from None
    ranks_fit = None
    if fit_ranks is not None:
        try:
            ranks_fit = tuple(int(x) for x in split_names(fit_ranks, "--fit-ranks"))
        except ValueError:
            raise ConfigError(
                f"--fit-ranks {fit_ranks!r}: give whole numbers, e.g. 8,256"
            ) from None
    least = 0.0 if min_bytes.strip() == "0" else float(parse_bytes(min_bytes, "--min-bytes"))
    return LogOptions(machine, ranks, nodes, kind, ranks_fit, least)


def register(app: click.Group) -> None:
    """Add `calibrate` to the axsim command group."""
    app.add_command(calibrate_command)
