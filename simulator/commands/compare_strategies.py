"""`axsim compare-strategies`: every strategy's best configuration on one machine."""

from __future__ import annotations

import json
import sys

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
from simulator.errors import ConfigError
from simulator.outputs.versions import stamp
from simulator.trials.strategies import (
    DEFAULT_MAX_CANDIDATES,
    DEFAULT_STRATEGIES,
    StrategyOutcome,
    outcomes_json,
    speedups,
)
from simulator.units import format_bytes, format_seconds, split_names


def _config_text(o: StrategyOutcome) -> str:
    cfg = dict(o.config or {})
    cfg.pop("strategy", None)
    keep: tuple[str, ...] = ("grid", "tp", "pp", "shard", "q", "data", "distributed_optimizer")
    keep += ("microbatch_sequences", "forward_partition", "backward_partition")
    keep += ("gradient_partition",)
    parts = []
    for k in keep:
        if k in cfg and cfg[k] is not None:
            v = cfg[k]
            if isinstance(v, dict):
                v = "x".join(str(v[a]) for a in ("x", "y", "z", "data"))
            parts.append(f"{k}={v}")
    return " ".join(parts).replace("microbatch_sequences", "mbs")


def render_outcomes(outcomes: list[StrategyOutcome], title: str) -> None:
    """Print the comparison as a rich table (stdout)."""
    from rich.markup import escape
    from rich.table import Table

    from simulator.outputs.render import stdout_console

    table = Table(title=title)
    heads: tuple[str, ...] = ("strategy", "iteration", "TFLOP/s/GPU", "% peak", "exposed comm")
    heads += ("mem/GPU",)
    heads += ("max batch", "speedup", "best configuration")
    for col in heads:
        table.add_column(col, justify="left" if col in (heads[0], heads[-1]) else "right")
    for o, sp in zip(outcomes, speedups(outcomes), strict=True):
        if o.report is None:
            table.add_row(o.strategy, "skipped", *["-"] * 6, "see below")
            continue
        if o.same_program_as:
            what = f"same program as {o.same_program_as}: {_config_text(o)}"
            table.add_row(o.strategy, f"= {o.same_program_as}", *["-"] * 6, escape(what))
            continue
        r = o.report
        table.add_row(
            o.strategy,
            format_seconds(r.iteration_time_s),
            f"{r.tflops_per_gpu:.1f}",
            f"{r.percent_of_advertised_peak:.1f}",
            format_seconds(r.exposed_comm_time_s),
            format_bytes(r.memory_per_gpu_bytes),
            f"{o.max_batch_sequences:,}",
            f"{sp:.2f}x" if sp is not None else "-",
            escape(_config_text(o)),
        )
    console = stdout_console()
    note = next((o.batch_note for o in outcomes if o.batch_note), None)
    if note:
        console.print(f"[yellow]batch:[/] {escape(note)}")
    console.print(table)
    for o in outcomes:
        if o.report is None:
            console.print(f"[yellow]{o.strategy} skipped:[/] {escape(o.note or 'no result')}")
    wall = sum(o.wall_time_s for o in outcomes)
    tried = sum(len(o.tried) for o in outcomes)
    console.print(
        f"[dim]speedup = iteration-time ratio to the first strategy that ran (same batch); "
        f"max batch = largest global batch (sequences) the chosen degrees fit without "
        f"gradient accumulation; {tried} configurations simulated in {wall:.1f} s[/]"
    )


def compare_strategies_schema() -> dict[str, object]:
    """`axsim compare-strategies --json` (simulator/outputs/json_schemas.py)."""
    from simulator.outputs.json_schemas import compare_strategies_json_schema

    return compare_strategies_json_schema()


def register(app: click.Group) -> None:
    @app.command("compare-strategies")
    @click.argument("config", required=False, type=click.Path(dir_okay=False))
    @machine_option()
    @size_options()
    @model_option()
    @click.option(
        "--strategies",
        default=",".join(DEFAULT_STRATEGIES),
        show_default=True,
        help="Comma-separated strategies; speedups are relative to the first.",
    )
    @shape_options("(default 2^24).")
    @network_option()
    @calibration_option()
    @set_option("Not parallel.*: each strategy's parallel section is searched.")
    @click.option(
        "--max-candidates",
        type=click.IntRange(min=1),
        default=DEFAULT_MAX_CANDIDATES,
        show_default=True,
        help="Configurations simulated per strategy (after memory pruning).",
    )
    @json_option(
        "compare-strategies",
        compare_strategies_schema,
        "One list: an object per strategy (its report's keys, config and speedup).",
    )
    @progress_option()
    def compare_cmd(
        config: str | None,
        machine: str | None,
        gpus: int | None,
        nodes: int | None,
        model: str | None,
        strategies: str,
        batch_tokens: int | None,
        seq_len: int | None,
        network: str | None,
        calibration: str | None,
        sets: tuple[str, ...],
        max_candidates: int,
        as_json: bool,
        progress: bool,
    ) -> None:
        """Search each strategy's configurations, simulate the best, compare them.

        CONFIG (optional) is an experiment file; its cluster, model, training and engine
        sections are kept and each strategy's parallel section and microbatch searched.
        Each strategy simulates up to --max-candidates configurations: minutes for large
        models or machines (a line on stderr says how many before it starts)."""
        from simulator.commands.simulate import flag_overrides, resolve_config
        from simulator.trials.strategies import compare_from_mapping, config_base
        from workloads.strategies import STRATEGY_NAMES

        names = [s.lower() for s in split_names(strategies, "--strategies")]
        unknown = [s for s in names if s not in STRATEGY_NAMES]
        if unknown:
            raise ConfigError(
                f"--strategies: unknown strategy '{unknown[0]}' "
                f"(known: {', '.join(STRATEGY_NAMES)})"
            )
        if any(s.split("=", 1)[0].strip().startswith("parallel.") for s in sets):
            raise ConfigError(
                "--set parallel.*: compare-strategies searches the parallel section; "
                "use axsim simulate --strategy NAME --set parallel.FIELD=VALUE for one run"
            )
        flags = flag_overrides(
            machine, gpus, model, None, batch_tokens, seq_len, None, None, network, calibration,
            nodes,
        )  # fmt: skip
        cfg = resolve_config(config, None, flags, sets, (gpus, nodes))
        base = config_base(cfg)
        print(
            f"axsim compare-strategies: {len(names)} strategies x up to {max_candidates} "
            f"configurations on {cfg.cluster.num_gpus or 'the custom machine'} GPUs "
            f"({cfg.model.name}); each is a full simulation, so this can take minutes",
            file=sys.stderr,
        )
        from simulator.outputs.render import count_bar

        with count_bar(progress, "searching", "configurations") as bar:
            outcomes = compare_from_mapping(
                base, names, max_candidates=max_candidates, progress=bar
            )
        if as_json:
            click.echo(json.dumps([stamp(o) for o in outcomes_json(outcomes)], default=str))
            return
        gpus_text = cfg.cluster.num_gpus or "custom"
        render_outcomes(outcomes, f"{cfg.model.name} on {gpus_text} GPUs of {cfg.cluster.machine}")
