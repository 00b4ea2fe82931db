"""`axsim search`: rank every valid AxoNN grid with the analytical model, simulate the top K."""

from __future__ import annotations

import json

import click

from simulator.commands.params import NETWORK_HELP
from simulator.commands.simulate import flag_overrides, resolve_config


def register(app: click.Group) -> None:
    @app.command("search")
    @click.argument("config", required=False, type=click.Path(dir_okay=False))
    @click.option("--machine", default=None, help="Machine preset.")
    @click.option("--gpus", type=int, default=None, help="Number of GPUs.")
    @click.option("--model", default=None, help="Model preset.")
    @click.option("--batch-tokens", type=int, default=None, help="Global batch in tokens.")
    @click.option("--seq-len", type=int, default=None, help="Sequence length.")
    @click.option(
        "--top",
        type=click.IntRange(min=1),
        default=10,
        show_default=True,
        help="How many of the model's best grids to simulate.",
    )
    @click.option(
        "--bandwidths",
        type=click.Choice(("topology", "paper")),
        default="topology",
        show_default=True,
        help="Group bandwidths: axsim's collective model on the machine, or the paper's measured table.",
    )
    @click.option(
        "--network",
        type=click.Choice(("alpha-beta", "contention")),
        default=None,
        help=NETWORK_HELP,
    )
    @click.option(
        "--calibration",
        type=click.Path(dir_okay=False),
        default=None,
        help="Calibration file from `axsim calibrate` (for the simulated grids).",
    )
    @click.option(
        "--set",
        "sets",
        multiple=True,
        help="Override any config field: section.field=value (repeatable).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object: ranked and best.")
    @click.option(
        "--progress/--no-progress", default=True, help="Progress bar on stderr (terminals only)."
    )
    def search_cmd(
        config: str | None,
        machine: str | None,
        gpus: int | None,
        model: str | None,
        batch_tokens: int | None,
        seq_len: int | None,
        top: int,
        bandwidths: str,
        network: str | None,
        calibration: str | None,
        sets: tuple[str, ...],
        as_json: bool,
        progress: bool,
    ) -> None:
        """Find the best AxoNN grid: analytical ranking of all grids, then simulation of the top K."""
        from simulator.errors import ConfigError
        from simulator.search import (
            bandwidth_provider,
            rank_grids,
            search_training,
            simulate_candidates,
        )
        from topologies.hardware import gpu_spec

        flags = flag_overrides(
            machine, gpus, model, None, batch_tokens, seq_len, None, None, network, calibration
        )
        cfg = resolve_config(config, "axonn", flags, sets)
        if cfg.parallel.strategy != "axonn":
            raise ConfigError(
                f"parallel.strategy: axsim search ranks AxoNN grids, not {cfg.parallel.strategy}; "
                "use axsim compare-strategies for the other strategies"
            )
        n = cfg.cluster.num_gpus
        if n is None:
            raise ConfigError("axsim search needs a machine preset with a GPU count")
        gpu = gpu_spec(cfg.cluster.gpu_type)
        bw = bandwidth_provider(cfg, bandwidths, cfg.cluster.gpus_per_node)
        ranked = rank_grids(cfg.model.spec(), cfg.parallel, search_training(cfg), n, gpu, bw)
        if not ranked:
            raise ConfigError(
                f"no valid, memory-feasible AxoNN grid for {cfg.model.name} on {n} GPUs"
            )
        from simulator.render import count_bar

        label = f"simulating the model's top {min(top, len(ranked))} of {len(ranked)} grids"
        with count_bar(progress, label, "grids") as bar:
            ranked, best = simulate_candidates(
                cfg, ranked, top, None if bar is None else lambda done, n: bar(label, done, n)
            )
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "ranked": [c.as_dict() for c in ranked],
                        "best": best.report.to_json() if best else None,
                    },
                    default=str,
                )
            )
            return
        from rich.table import Table

        from simulator.render import render_report, stdout_console

        table = Table(
            title=f"AxoNN grids for {cfg.model.name} on {n} {gpu.name} GPUs ({bandwidths} bandwidths)"
        )
        for col in (
            "model rank",
            "grid X,Y,Z,data",
            "microbatch",
            "model comm (s)",
            "simulated (s)",
            "sim rank",
        ):
            table.add_column(col, justify="right")
        for c in ranked[: max(top, 10)]:
            g = c.grid
            sim = (
                "-"
                if c.simulated_iteration_time_s is None
                else f"{c.simulated_iteration_time_s:.3f}"
            )
            table.add_row(
                str(c.model_rank),
                f"{g.x},{g.y},{g.z},{g.data}",
                f"{c.microbatch_sequences}x{c.microbatches}",
                f"{c.model_comm_time_s:.3f}",
                sim,
                "-" if c.simulated_rank is None else str(c.simulated_rank),
            )
        stdout_console().print(table)
        if best is not None:
            render_report(best.report)
