"""Record torch.profiler (Kineto) traces of a real 4D run, plus the run.json describing it.

Each rank runs `warmup` steps, then `timing_steps` unprofiled steps whose wall time is the
clean per-step measurement, then one profiler warm-up step and `steps` profiled steps
(ProfilerStep#N annotations, record_shapes=True). Traces go to
`out_dir/rank<R>.trace.json.gz`; rank 0 writes `out_dir/run.json` with the exact
configuration, the process groups, the trace pid of every rank and the measured step
times, so the simulator can replay the same run.
"""

from __future__ import annotations

import functools
import json
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile, schedule

from simulator.errors import ConfigError
from validation.torch4d.axonn_impl import axonn_version
from validation.torch4d.config import (
    MAX_CPU_WORLD,
    Grid,
    Overlap,
    RunSpec,
    parse_overlap,
    resolve_model,
)
from validation.torch4d.launch import backend, device, launch
from validation.torch4d.train import (
    DTYPES,
    build,
    compute_gradients,
    global_loss,
    local_batch,
    make_optimizer,
)

RUN_FORMAT = "axsim-torch4d-run/1"


def trace_name(rank: int) -> str:
    """File name of one rank's trace inside the output folder."""
    return f"rank{rank}.trace.json.gz"


def run_trace(
    grid: Grid,
    model: str = "tiny",
    steps: int = 3,
    out_dir: str | Path = "traces",
    overlap: Overlap | str = "none",
    impl: str = "axsim",
    *,
    batch_size: int | None = None,
    seq_len: int | None = None,
    hidden: int | None = None,
    layers: int | None = None,
    heads: int | None = None,
    checkpoint: bool = False,
    warmup: int = 1,
    timing_steps: int | None = None,
    optimizer: str = "adam",
    dtype: str = "float32",
    world_size: int | None = None,
) -> list[Path]:
    """Train `steps` profiled steps on `grid` and return the per-rank trace paths.

    Raises ConfigError for inconsistent input (grid vs world size, model too large...).
    """
    dims = resolve_model(
        model, layers=layers, hidden=hidden, heads=heads, seq_len=seq_len, batch=batch_size
    )
    ov = parse_overlap(overlap) if isinstance(overlap, str) else overlap
    spec = RunSpec(
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
    _check_world(spec, world_size)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    launch(functools.partial(_trace_rank, spec, str(out.resolve())), grid.world_size)
    return [out / trace_name(r) for r in range(grid.world_size)]


def _check_world(spec: RunSpec, world_size: int | None) -> None:
    """Refuse a run that cannot start: wrong world size, too many CPU ranks, no axonn."""
    grid = spec.grid
    if world_size is not None and world_size != grid.world_size:
        raise ConfigError(
            f"grid {grid} has {grid.world_size} ranks but the world size is {world_size}"
        )
    if not torch.cuda.is_available() and grid.world_size > MAX_CPU_WORLD:
        raise ConfigError(
            f"{grid.world_size} ranks is too many for one CPU host (at most {MAX_CPU_WORLD})"
        )
    if spec.impl == "axonn" and axonn_version() is None:
        raise ConfigError(
            "--impl axonn needs the axonn package (pip install axonn==0.2.0 --no-deps)"
        )


def _trace_rank(spec: RunSpec, out_dir: str) -> None:
    rank, dev, dtype = dist.get_rank(), device(), DTYPES[spec.dtype]
    dm = build(
        spec.impl, spec.dims, spec.grid, spec.overlap, spec.checkpoint, dev, dtype, spec.seed
    )
    opt = make_optimizer(spec.optimizer, list(dm.model.parameters()))
    numel = spec.dims.batch * spec.dims.seq_len * spec.dims.hidden
    unprofiled = spec.warmup + spec.timing_steps
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    path = Path(out_dir) / trace_name(rank)
    prof = profile(
        activities=activities,
        record_shapes=True,
        schedule=schedule(wait=unprofiled, warmup=1, active=spec.steps, repeat=1),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    )
    times, losses, step_numbers = [], [], []
    dist.barrier()
    try:
        with prof:
            for step in range(unprofiled + 1 + spec.steps):
                x, target = local_batch(spec.dims, spec.grid, rank, step, spec.seed, dev, dtype)
                _sync(dev)
                start = time.perf_counter()
                local = compute_gradients(dm, x, target, numel)
                opt.step()
                _sync(dev)
                times.append(time.perf_counter() - start)
                losses.append(local)
                step_numbers.append(prof.step_num)
                prof.step()
        loss_values = [global_loss(v, spec.grid) for v in losses]
        all_times: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(all_times, (times, os.getpid()))
    finally:
        dm.cleanup()
    if rank == 0:
        run = _run_json(spec, all_times, loss_values, step_numbers, dev)
        (Path(out_dir) / "run.json").write_text(json.dumps(run, indent=2) + "\n")


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _run_json(
    spec: RunSpec,
    per_rank: list[Any],
    losses: list[float],
    step_numbers: list[int],
    dev: torch.device,
) -> dict[str, Any]:
    """run.json: configuration, environment, groups and step times (max over ranks)."""
    unprofiled = spec.warmup + spec.timing_steps
    step_max = [max(r[0][i] for r in per_rank) for i in range(len(per_rank[0][0]))]
    timing = step_max[spec.warmup : unprofiled]
    profiled = step_max[unprofiled + 1 :]
    world = spec.grid.world_size
    return {
        "format": RUN_FORMAT,
        "config": spec.to_json(),
        "world_size": world,
        "backend": backend(),
        "device": dev.type,
        "threads_per_rank": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "torch_version": torch.__version__,
        "axonn_version": axonn_version() if spec.impl == "axonn" else None,
        "python_version": platform.python_version(),
        "tokens_per_step": spec.dims.batch * spec.dims.seq_len,
        "traces": {str(r): trace_name(r) for r in range(world)},
        "trace_pids": {str(r): per_rank[r][1] for r in range(world)},
        "groups": {kind: spec.grid.group_ranks(kind) for kind in ("X", "Y", "Z", "data")},
        "phases": {
            "warmup": spec.warmup,
            "timing": spec.timing_steps,
            "profiler_warmup": 1,
            "profiled": spec.steps,
        },
        "profiler_step_numbers": step_numbers[unprofiled + 1 :],
        "wall_s_per_step": statistics.median(timing) if timing else None,
        "wall_s_per_step_profiled": statistics.median(profiled),
        "step_wall_s": step_max,
        "step_wall_s_per_rank": [r[0] for r in per_rank],
        "losses": losses,
    }
