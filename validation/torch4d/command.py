"""`axsim trace-torch`: run the real 4D implementation and record Kineto traces.

Input is validated before torch is imported, so mistakes cost no process start-up; under
torchrun (`torchrun --nproc-per-node N $(which axsim) trace-torch ...`) every rank runs
this command and the world comes from the environment.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from simulator.commands.options import MODEL_HELP, SEQ_LEN_HELP
from simulator.errors import ConfigError
from validation.torch4d.config import (
    IMPLS,
    PRESETS,
    RunSpec,
    parse_grid,
    parse_overlap,
    resolve_model,
)


@click.command("trace-torch")
@click.option(
    "--grid",
    "grid_text",
    required=True,
    help="Gx,Gy,Gz,Gdata (AxoNN's G_intra_c, G_intra_r, G_intra_d, G_data).",
)
@click.option(
    "--model",
    default="tiny",
    show_default=True,
    help=f"{MODEL_HELP} Here: a small one (the real model runs), or torch4d's "
    f"{' or '.join(PRESETS)}.",
)
@click.option(
    "--steps", default=3, show_default=True, type=click.IntRange(min=1), help="Profiled steps."
)
@click.option(
    "-o",
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder for traces and run.json.",
)
@click.option(
    "--impl",
    default="axsim",
    show_default=True,
    type=click.Choice(IMPLS),
    help="Our implementation or the real axonn 0.2.0.",
)
@click.option(
    "--overlap", default="none", show_default=True, help="oar,ors,oag (any subset), all or none."
)
@click.option(
    "--batch-size",
    type=click.IntRange(min=1),
    help="Global batch in sequences (default: the model's).",
)
@click.option("--seq-len", type=click.IntRange(min=1), help=f"{SEQ_LEN_HELP} Default: the model's.")
@click.option("--hidden", type=click.IntRange(min=1), help="Hidden size (default: the model's).")
@click.option("--layers", type=click.IntRange(min=1), help="Layers (default: the model's).")
@click.option("--heads", type=click.IntRange(min=1), help="Attention heads (default: the model's).")
@click.option(
    "--checkpoint/--no-checkpoint",
    default=False,
    show_default=True,
    help="Activation checkpointing per block.",
)
@click.option(
    "--warmup",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="Unmeasured steps first.",
)
@click.option(
    "--timing-steps", type=click.IntRange(min=0), help="Unprofiled, timed steps (default: --steps)."
)
@click.option(
    "--optimizer",
    default="adam",
    show_default=True,
    type=click.Choice(["adam", "sgd"]),
    help="Optimizer of the training step.",
)
@click.option(
    "--dtype",
    default="float32",
    show_default=True,
    type=click.Choice(["float32", "bfloat16", "float64"]),
    help="Parameter and activation dtype.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace the --out folder of an earlier run (whole, once the new one is done).",
)
@click.option(
    "--world-size",
    type=click.IntRange(min=1),
    help="Processes to spawn (default: the grid's product).",
)
def trace_torch(
    grid_text: str,
    model: str,
    steps: int,
    out_dir: Path,
    impl: str,
    overlap: str,
    batch_size: int | None,
    seq_len: int | None,
    hidden: int | None,
    layers: int | None,
    heads: int | None,
    checkpoint: bool,
    warmup: int,
    timing_steps: int | None,
    optimizer: str,
    dtype: str,
    overwrite: bool,
    world_size: int | None,
) -> None:
    """Train a GPT block stack with the 4D algorithm on CPU/gloo (or CUDA/NCCL) and
    write one Kineto trace per rank plus run.json."""
    grid = parse_grid(grid_text)
    ov = parse_overlap(overlap)
    dims = resolve_model(
        model, layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, batch=batch_size
    )
    RunSpec(
        grid,
        dims,
        ov,
        impl,
        steps,
        warmup,
        steps if timing_steps is None else timing_steps,
        checkpoint,
        optimizer,
        dtype,
    )
    if world_size is not None and world_size != grid.world_size:
        raise ConfigError(
            f"grid {grid} has {grid.world_size} ranks but the world size is {world_size}"
        )
    from simulator.outputs.files import make_out_dir
    from simulator.outputs.staging import check_out_folder, staged_folder

    def trace(folder: Path) -> list[Path]:
        from validation.torch4d.trace import run_trace  # imports torch

        return run_trace(
            grid,
            model,
            steps,
            folder,
            ov,
            impl,
            batch_size=batch_size,
            seq_len=seq_len,
            hidden=hidden,
            layers=layers,
            heads=heads,
            checkpoint=checkpoint,
            warmup=warmup,
            timing_steps=timing_steps,
            optimizer=optimizer,
            dtype=dtype,
            world_size=world_size,
        )

    if "RANK" in os.environ:  # torchrun: every rank writes into the one folder it names
        make_out_dir(out_dir)  # a path that cannot be a folder fails now, not after training
        paths = trace(out_dir)
    else:  # spawned here: staged, so an interrupted run leaves the previous folder or none
        check_out_folder(out_dir, overwrite=overwrite)
        with staged_folder(out_dir, "trace-torch", overwrite=overwrite) as stage:
            paths = [out_dir / p.relative_to(stage) for p in trace(stage)]
    run_file = out_dir / "run.json"
    if os.environ.get("RANK", "0") == "0" and run_file.exists():  # spawner, or torchrun rank 0
        run = json.loads(run_file.read_text())
        per_step = run["wall_s_per_step"] or run["wall_s_per_step_profiled"]
        click.echo(
            f"{len(paths)} traces and run.json in {out_dir} ({impl}, grid {grid}, {dims.name}, "
            f"{per_step * 1e3:.1f} ms/step)"
        )


def register(app: click.Group) -> None:
    """Add `trace-torch` to the axsim command group."""
    app.add_command(trace_torch)
