"""`axsim compare-strategies`: every strategy's best configuration on one machine."""

from __future__ import annotations

import json

import click

from simulator.errors import ConfigError
from simulator.outputs.versions import stamp
from simulator.search.strategies import (
    DEFAULT_MAX_CANDIDATES,
    DEFAULT_STRATEGIES,
    StrategyOutcome,
    compare_strategies,
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
        if o.result is None:
            table.add_row(o.strategy, "skipped", *["-"] * 6, "see below")
            continue
        if o.same_program_as:
            what = f"same program as {o.same_program_as}: {_config_text(o)}"
            table.add_row(o.strategy, f"= {o.same_program_as}", *["-"] * 6, escape(what))
            continue
        r = o.result.report
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
        if o.result is None:
            console.print(f"[yellow]{o.strategy} skipped:[/] {escape(o.note or 'no result')}")
    wall = sum(o.wall_time_s for o in outcomes)
    tried = sum(len(o.tried) for o in outcomes)
    console.print(
        f"[dim]speedup = iteration-time ratio to the first strategy that ran (same batch); "
        f"max batch = largest global batch (sequences) the chosen degrees fit without "
        f"gradient accumulation; {tried} configurations simulated in {wall:.1f} s[/]"
    )


def register(app: click.Group) -> None:
    @app.command("compare-strategies")
    @click.option("--machine", required=True, help="Machine preset, e.g. dgx-h100.")
    @click.option("--gpus", type=int, required=True, help="Number of GPUs.")
    @click.option("--model", required=True, help="Model preset, e.g. llama2-7b.")
    @click.option(
        "--strategies",
        default=",".join(DEFAULT_STRATEGIES),
        show_default=True,
        help="Comma-separated strategies; speedups are relative to the first.",
    )
    @click.option(
        "--batch-tokens", type=int, default=None, help="Global batch in tokens (default 2^24)."
    )
    @click.option("--network", type=click.Choice(("alpha-beta", "contention")), default=None)
    @click.option(
        "--max-candidates",
        type=int,
        default=DEFAULT_MAX_CANDIDATES,
        show_default=True,
        help="Configurations simulated per strategy (after memory pruning).",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON list to stdout.")
    @click.option(
        "--progress/--no-progress", default=True, help="Progress bar on stderr (terminals only)."
    )
    def compare_cmd(
        machine: str,
        gpus: int,
        model: str,
        strategies: str,
        batch_tokens: int | None,
        network: str | None,
        max_candidates: int,
        as_json: bool,
        progress: bool,
    ) -> None:
        """Search each strategy's configurations, simulate the best, compare them."""
        names = [s.lower() for s in split_names(strategies, "--strategies")]
        if gpus < 1:
            raise ConfigError(f"--gpus: must be positive, got {gpus}")
        if max_candidates < 1:
            raise ConfigError(f"--max-candidates: must be positive, got {max_candidates}")
        from simulator.outputs.render import count_bar

        with count_bar(progress, "searching", "configurations") as bar:
            outcomes = compare_strategies(
                machine,
                gpus,
                model,
                names,
                batch_tokens=batch_tokens,
                network=network,
                max_candidates=max_candidates,
                progress=bar,
            )
        if as_json:
            click.echo(json.dumps([stamp(o) for o in outcomes_json(outcomes)], default=str))
            return
        render_outcomes(outcomes, f"{model} on {gpus} GPUs of {machine}")
