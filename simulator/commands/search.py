"""`axsim search`: rank every valid AxoNN grid with the analytical model, simulate the top K."""

from __future__ import annotations

import json

import click

from simulator.commands.options import (
    json_option,
    machine_option,
    model_option,
    progress_option,
    set_option,
    shape_options,
    size_options,
)
from simulator.commands.params import calibration_option, network_option
from simulator.commands.simulate import flag_overrides, resolve_config
from simulator.outputs.versions import stamp


def search_schema() -> dict[str, object]:
    """`axsim search --json` (simulator/outputs/json_schemas.py)."""
    from simulator.outputs.json_schemas import search_json_schema

    return search_json_schema()


def register(app: click.Group) -> None:
    @app.command("search")
    @click.argument("config", required=False, type=click.Path(dir_okay=False))
    @machine_option()
    @size_options()
    @model_option()
    @shape_options()
    @click.option(
        "--top",
        type=click.IntRange(min=1),
        default=10,
        show_default=True,
        help="How many of the model's best grids to simulate.",
    )
    @click.option(
        "--screen",
        type=int,
        default=None,
        help="How many of the model's best candidates to replay statically before "
        "simulating (default 40; 0: simulate the model's top K, the paper's procedure).",
    )
    @click.option(
        "--procedure",
        type=click.Choice(("axsim", "paper")),
        default="axsim",
        show_default=True,
        help="axsim: axsim's own ranking, screening and simulation; paper: the SC'24 "
        "paper's procedure, its published analytical model's top K (Megatron-AxoNN "
        "examples/comm_model.py with its bandwidth tables) simulated.",
    )
    @click.option(
        "--bandwidths",
        type=click.Choice(("topology", "paper")),
        default="topology",
        show_default=True,
        help="Group bandwidths: axsim's collective model on the machine, or the paper's measured table.",
    )
    @network_option()
    @calibration_option("Calibration file from `axsim calibrate` (for the simulated grids).")
    @set_option()
    @json_option("search", search_schema, "One object: the ranked grids and the best's report.")
    @progress_option()
    def search_cmd(
        config: str | None,
        machine: str | None,
        gpus: int | None,
        nodes: int | None,
        model: str | None,
        batch_tokens: int | None,
        seq_len: int | None,
        top: int,
        screen: int | None,
        procedure: str,
        bandwidths: str,
        network: str | None,
        calibration: str | None,
        sets: tuple[str, ...],
        as_json: bool,
        progress: bool,
    ) -> None:
        """Find the best AxoNN grid: analytical ranking of all grids, then simulation of the top K."""
        from simulator.errors import ConfigError
        from simulator.outputs.render import count_bar
        from simulator.search.grids import DEFAULT_SCREEN
        from simulator.trials.simulated import search

        if screen is not None and screen < 0:
            raise ConfigError(f"--screen must be non-negative, got {screen}")
        flags = flag_overrides(
            machine, gpus, model, None, batch_tokens, seq_len, None, None, network, calibration,
            nodes,
        )  # fmt: skip
        cfg = resolve_config(config, "axonn", flags, sets, (gpus, nodes))
        label = f"simulating the {top} most promising grids"
        if procedure == "paper" and (screen is not None or bandwidths != "topology"):
            raise ConfigError(
                "--procedure paper ranks with the published model and its own bandwidth "
                "table: --screen and --bandwidths do not apply"
            )
        with count_bar(progress, label, "grids") as bar:
            tick = None if bar is None else lambda done, n: bar(label, done, n)
            if procedure == "paper":
                from simulator.trials.procedure import paper_procedure

                outcome = paper_procedure(cfg, top, tick)
            else:
                outcome = search(
                    cfg, top, DEFAULT_SCREEN if screen is None else screen, bandwidths, tick
                )
        ranked, best = outcome.candidates, outcome.best
        n = cfg.cluster.num_gpus
        from topologies.hardware import gpu_spec

        gpu = gpu_spec(cfg.cluster.gpu_type)
        if as_json:
            click.echo(
                json.dumps(
                    stamp(
                        {
                            "ranked": [c.as_dict() for c in ranked],
                            "best": best.report.to_json() if best else None,
                        }
                    ),
                    default=str,
                )
            )
            return
        from rich.table import Table

        from simulator.outputs.render import render_report, stdout_console

        table = Table(
            title=f"AxoNN grids for {cfg.model.name} on {n} {gpu.name} GPUs "
            + (
                "(the paper's procedure: published model's order)"
                if procedure == "paper"
                else f"({bandwidths} bandwidths)"
            )
        )
        for col in (
            "model rank",
            "grid X,Y,Z,data",
            "microbatch",
            "model comm (s)",
            "replay (s)",
            "simulated (s)",
            "sim rank",
        ):
            table.add_column(col, justify="right")

        def secs(v: float | None) -> str:
            return "-" if v is None else f"{v:.3f}"

        for c in ranked[: max(top, 10)]:
            table.add_row(
                str(c.model_rank),
                c.label,
                f"{c.microbatch_sequences}x{c.microbatches}",
                f"{c.model_comm_time_s:.3f}",
                secs(c.estimated_iteration_time_s),
                secs(c.simulated_iteration_time_s),
                "-" if c.simulated_rank is None else str(c.simulated_rank),
            )
        stdout_console().print(table)
        if best is not None:
            render_report(best.report)
