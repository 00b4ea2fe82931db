"""`axsim simulate`: simulate one training iteration and explain where the time goes."""

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
    nodes: int | None = None,
) -> list[str]:
    """Translate convenience flags into dotted overrides (applied before --set). Given
    both, --gpus is the override and `check_size_flags` compares --nodes after loading."""
    out: list[str] = []
    if machine is not None:  # an empty value is an error, not the default
        out.append(f"cluster.machine={json.dumps(machine)}")
    if gpus is not None:
        out.append(f"cluster.gpus={gpus}")  # replaces a node count (apply_overrides)
    elif nodes is not None:
        out.append(f"cluster.nodes={nodes}")  # replaces a GPU count
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
    config_path: str | None,
    strategy: str | None,
    overrides: list[str],
    sets: tuple[str, ...],
    size: tuple[int | None, int | None] = (None, None),
) -> ExperimentConfig:
    """Config file (or embedded default) + --strategy + flags + --set, validated once (a
    new strategy resets the parallel section: `simulator.config.apply_overrides`);
    `size` is (--gpus, --nodes), checked against each other on the machine."""
    if strategy and strategy not in STRATEGY_NAMES:
        raise ConfigError(
            f"--strategy: unknown strategy '{strategy}' (known: {', '.join(STRATEGY_NAMES)})"
        )
    head = [f"parallel.strategy={strategy}"] if strategy else []
    gpus, nodes = size
    if gpus is not None:
        check_size_flags(config_path, [*head, *overrides, *sets], gpus, nodes)
    return load_config(config_path, [*head, *overrides, *sets])


def check_size_flags(
    config_path: str | None, overrides: list[str], gpus: int, nodes: int | None
) -> None:
    """--gpus must fill whole nodes of the run's machine and, with --nodes, name the same
    size (one line naming the flags, not the config's `cluster.gpus=... is not ...`)."""
    from simulator.config import apply_overrides, default_config_mapping, read_yaml_mapping

    data = default_config_mapping() if config_path is None else read_yaml_mapping(config_path)
    cluster = apply_overrides(data, overrides).get("cluster")
    machine = str(cluster.get("machine", "perlmutter")) if isinstance(cluster, dict) else ""
    if machine.strip().lower() == "custom":
        if nodes is None:
            return  # part of a custom topology: build.py checks it against the file
        raise ConfigError(
            "--nodes: a custom topology's nodes are its file's; give --gpus to use part of it"
        )
    from simulator.commands.options import preset_nodes

    preset_nodes(machine.strip().lower(), gpus, nodes)


def report_schema() -> dict[str, object]:
    """`axsim simulate --json`: the report (simulator/outputs/schema.py)."""
    from simulator.outputs.schema import report_json_schema

    return report_json_schema()


def register(app: click.Group) -> None:
    @app.command("simulate")
    @click.argument("config", required=False, type=click.Path(dir_okay=False))
    @machine_option()
    @size_options()
    @model_option()
    @click.option(
        "--strategy",
        default=None,
        help="Parallel strategy: axonn (default), megatron, zero3, fsdp, hsdp, zeropp, "
        "zeropp-hier, fsdp-tp, fsdp-pp, optimus. Its options: --set parallel.FIELD=VALUE.",
    )
    @click.option("--grid", default=None, help="AxoNN grid X,Y,Z,DATA (default: chosen for you).")
    @shape_options()
    @click.option("--overlap", default=None, help="AxoNN overlap flags: oar,ors,oag or none.")
    @set_option()
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
    @json_option("simulate", report_schema, "One object: the report.")
    @click.option(
        "--strict-memory",
        is_flag=True,
        help="Exit with code 3 if the configuration certainly does not fit in GPU memory "
        "(even the memory model's lower estimate exceeds it; an uncertain fit only warns, "
        "with the margin and the biggest terms).",
    )
    @progress_option()
    def simulate_cmd(
        config: str | None,
        machine: str | None,
        gpus: int | None,
        nodes: int | None,
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
            machine, gpus, model, grid, batch_tokens, seq_len, overlap, engine, network,
            calibration, nodes,
        )  # fmt: skip
        if trace_ranks is not None and not out_dir:
            raise ConfigError("--trace-ranks selects the ranks written by --out; give --out DIR")
        if chakra and not out_dir:
            raise ConfigError("--chakra writes into the --out folder; give --out DIR")
        if chakra:
            from simulator.outputs.chakra import chakra_schema

            chakra_schema()  # before the simulation: a missing extra is one clear line
        if out_dir:  # traces and timeline.csv show every microbatch
            flags.append("engine.virtual_microbatches=false")
        cfg = resolve_config(config, strategy, flags, sets, (gpus, nodes))
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
