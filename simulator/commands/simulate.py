"""`axsim simulate`: simulate one training iteration and explain where the time goes."""

from __future__ import annotations

import json
import sys

import click

from simulator.commands.params import ENGINE_HELP, calibration_option, network_option
from simulator.config import ExperimentConfig, load_config
from simulator.errors import ConfigError
from simulator.outputs.memory_verdict import MemoryVerdict, describe
from topologies.machines import MAX_GPUS
from workloads.axonn.params import Grid
from workloads.strategies import STRATEGY_NAMES


def flag_overrides(
    machine: str | None,
    gpus: int | None,
    model: str | None,
    grid: str | None,
    batch_tokens: int | None,
    seq_len: int | None,
    overlap: str | None,
    engine: str | None,
    network: str | None,
    calibration: str | None,
) -> list[str]:
    """Translate convenience flags into dotted overrides (applied before --set)."""
    out: list[str] = []
    if machine is not None:  # an empty value is an error, not the default
        out.append(f"cluster.machine={json.dumps(machine)}")
    if gpus is not None:
        out.append(f"cluster.gpus={gpus}")  # replaces a node count (apply_overrides)
    if model is not None:
        out.append(f"model.name={json.dumps(model)}")
    if grid is not None:
        try:
            g = Grid.parse(grid)
        except ValueError as e:
            raise ConfigError(f"--grid: {e}") from None
        out.append(f"parallel.grid={{x: {g.x}, y: {g.y}, z: {g.z}, data: {g.data}}}")
    if batch_tokens is not None:
        out.append(f"training.batch_tokens={batch_tokens}")
    if seq_len is not None:
        out.append(f"model.seq_len={seq_len}")
    if overlap is not None:
        flags = (
            []
            if overlap.strip().lower() == "none"
            else [f.strip().lower() for f in overlap.split(",") if f.strip()]
        )
        unknown = [f for f in flags if f not in ("oar", "ors", "oag")]
        if unknown:
            raise ConfigError(f"--overlap: unknown flag '{unknown[0]}' (use oar,ors,oag or none)")
        out.append(f"parallel.overlap=[{', '.join(flags)}]")
    if engine is not None:
        out.append(f"engine.mode={engine}")
    if network is not None:
        out.append(f"engine.network={network}")
    if calibration is not None:
        out.append(f"engine.calibration={json.dumps(calibration)}")
    return out


def resolve_config(
    config_path: str | None, strategy: str | None, overrides: list[str], sets: tuple[str, ...]
) -> ExperimentConfig:
    """Config file (or embedded default) + --strategy + flags + --set, validated once (a
    new strategy resets the parallel section: `simulator.config.apply_overrides`)."""
    if strategy and strategy not in STRATEGY_NAMES:
        raise ConfigError(
            f"--strategy: unknown strategy '{strategy}' (known: {', '.join(STRATEGY_NAMES)})"
        )
    head = [f"parallel.strategy={strategy}"] if strategy else []
    return load_config(config_path, [*head, *overrides, *sets])


def register(app: click.Group) -> None:
    @app.command("simulate")
    @click.argument("config", required=False, type=click.Path(dir_okay=False))
    @click.option(
        "--machine",
        default=None,
        help="Machine preset (perlmutter, frontier, alps, dgx-a100, dgx-h100, dgx-h200, frontera-rtx, cpu-host, or custom with cluster.topology_file).",
    )
    @click.option("--gpus", type=int, default=None, help="Number of GPUs.")
    @click.option("--model", default=None, help="Model preset, e.g. gpt-80b.")
    @click.option(
        "--strategy",
        default=None,
        help="Parallel strategy: axonn (default), megatron, zero3, fsdp, hsdp, zeropp, "
        "zeropp-hier, fsdp-tp, fsdp-pp, optimus. Its options: --set parallel.FIELD=VALUE.",
    )
    @click.option("--grid", default=None, help="AxoNN grid X,Y,Z,DATA (default: chosen for you).")
    @click.option("--batch-tokens", type=int, default=None, help="Global batch in tokens.")
    @click.option("--seq-len", type=int, default=None, help="Sequence length.")
    @click.option("--overlap", default=None, help="AxoNN overlap flags: oar,ors,oag or none.")
    @click.option(
        "--set",
        "sets",
        multiple=True,
        help="Override any config field: section.field=value (repeatable).",
    )
    @click.option(
        "--engine", type=click.Choice(("auto", "full", "symmetric")), default=None, help=ENGINE_HELP
    )
    @network_option()
    @calibration_option()
    @click.option(
        "-o",
        "--out",
        "out_dir",
        type=click.Path(file_okay=False),
        default=None,
        help="Write report, config.resolved.yaml, timeline, links and a Perfetto trace here.",
    )
    @click.option(
        "--overwrite",
        is_flag=True,
        help="Replace the --out folder of an earlier run (it is replaced whole, once the "
        "new outputs are complete).",
    )
    @click.option(
        "--trace-ranks",
        default=None,
        help="Ranks in the traces and timeline (e.g. 0-7,64 or all; default: the first 8, "
        "or in symmetric mode one rank per class, see rank_map.json).",
    )
    @click.option(
        "--gzip/--no-gzip",
        "gzip_traces",
        default=True,
        help="Compress trace.json and the Kineto traces (default: .json.gz).",
    )
    @click.option(
        "--chakra",
        is_flag=True,
        help="Also write Chakra execution traces (chakra/et.R.et + comm_group.json; needs "
        "pip install 'axsim[chakra]').",
    )
    @click.option(
        "--pictures/--no-pictures",
        default=True,
        help="With --out: timeline and breakdown pictures (png, svg, pdf; needs matplotlib).",
    )
    @click.option(
        "--json",
        "as_json",
        is_flag=True,
        help="Print exactly one JSON object (the report) to stdout.",
    )
    @click.option(
        "--strict-memory",
        is_flag=True,
        help="Exit with code 3 if the configuration certainly does not fit in GPU memory "
        "(even the memory model's lower estimate exceeds it; an uncertain fit only warns, "
        "with the margin and the biggest terms).",
    )
    @click.option(
        "--progress/--no-progress", default=True, help="Progress bar on stderr (terminals only)."
    )
    def simulate_cmd(
        config: str | None,
        machine: str | None,
        gpus: int | None,
        model: str | None,
        strategy: str | None,
        grid: str | None,
        batch_tokens: int | None,
        seq_len: int | None,
        overlap: str | None,
        sets: tuple[str, ...],
        engine: str | None,
        network: str | None,
        calibration: str | None,
        out_dir: str | None,
        overwrite: bool,
        trace_ranks: str | None,
        gzip_traces: bool,
        chakra: bool,
        pictures: bool,
        as_json: bool,
        strict_memory: bool,
        progress: bool,
    ) -> None:
        """Simulate one training iteration (no arguments: GPT-80B on 1,024 Perlmutter GPUs)."""
        from simulator.outputs.files import parse_trace_ranks, write_outputs
        from simulator.outputs.render import progress_bar, render_report
        from simulator.outputs.staging import check_out_folder, staged_folder
        from simulator.trials.automatic import simulate_best_of

        flags = flag_overrides(
            machine, gpus, model, grid, batch_tokens, seq_len, overlap, engine, network, calibration
        )
        if trace_ranks is not None and not out_dir:
            raise ConfigError("--trace-ranks selects the ranks written by --out; give --out DIR")
        if chakra and not out_dir:
            raise ConfigError("--chakra writes into the --out folder; give --out DIR")
        if chakra:
            from simulator.outputs.chakra import chakra_schema

            chakra_schema()  # before the simulation: a missing extra is one clear line
        if out_dir:  # traces and timeline.csv show every microbatch
            flags.append("engine.virtual_microbatches=false")
        cfg = resolve_config(config, strategy, flags, sets)
        if overwrite and not out_dir:
            raise ConfigError("--overwrite replaces the --out folder; give --out DIR")
        if out_dir:  # before the simulation, which may take minutes
            check_out_folder(out_dir, overwrite=overwrite)
            parse_trace_ranks(trace_ranks, cfg.cluster.num_gpus or MAX_GPUS)
        with progress_bar(progress) as bar:
            # without a grid, the static choice's best few are simulated, the fastest kept
            result = simulate_best_of(cfg, progress=bar)
        report = result.report
        if out_dir:
            ranks = parse_trace_ranks(trace_ranks, result.engine.timeline.world_size)
            with staged_folder(out_dir, "simulate", overwrite=overwrite) as stage:
                write_outputs(
                    result, stage, ranks, gzip=gzip_traces, chakra=chakra, pictures=pictures
                )
        if as_json:
            click.echo(json.dumps(report.to_json(), default=str))
        else:
            render_report(report)
            if out_dir:
                click.echo(
                    f"outputs written to {out_dir.rstrip('/')}/ (report.json, config.resolved.yaml, "
                    "timeline.csv, links.csv, rank_map.json, trace.json.gz, kineto/, pictures"
                    + (", chakra/" if chakra else "")
                    + ")"
                )
        if report.memory_verdict != "fits":
            verdict = MemoryVerdict(
                report.memory_verdict,
                report.memory_margin_bytes,
                report.memory_lower_bytes,
                report.memory_top_terms,
            )
            line = describe(verdict, report.memory_capacity_bytes, report.gpu)
            print(f"axsim: warning: {line}", file=sys.stderr)
            if strict_memory and not report.fits_in_memory:
                raise SystemExit(3)
