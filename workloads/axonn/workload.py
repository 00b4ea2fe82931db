"""Build AxoNN 4D workloads: grid and microbatch choice, validation, the OpGraph."""

from __future__ import annotations

import numpy as np

from workloads.axonn.grid import axonn_groups
from workloads.axonn.implementation import preset_for, weight_policy
from workloads.axonn.layers import block_layouts, logits_layout
from workloads.axonn.memory import MemoryBreakdown, axonn_memory
from workloads.axonn.params import AxonnParallel, Grid
from workloads.axonn.program import AxonnSetup, build_axonn_program
from workloads.axonn.schedule import AxonnCalls
from workloads.errors import WorkloadError
from workloads.graph import OpGraph
from workloads.models import TransformerSpec
from workloads.run import TrainingSetup, batch_sequences, divisors

__all__ = ["TrainingSetup", "batch_sequences", "build_axonn_workload", "check_grid"]


def check_grid(
    spec: TransformerSpec, grid: Grid, params: AxonnParallel, training: TrainingSetup, gpus: int
) -> int:
    """Validate a grid against the model, batch and GPU count; return sequences per GPU."""
    if params.pipeline != 1:
        raise WorkloadError("parallel.pipeline > 1 (AxoNN's G_inter) is not supported by axsim yet")
    if grid.size != gpus:
        raise WorkloadError(
            f"parallel.grid: X*Y*Z*data = {grid.size} does not equal the {gpus} GPUs"
        )
    if params.cached_layers is not None and params.cached_layers > spec.layers:
        raise WorkloadError(
            f"parallel.cached_layers={params.cached_layers} exceeds the model's {spec.layers} layers"
        )
    block_layouts(spec, grid, params.transpose_alternate)
    logits_layout(spec, grid)
    seqs = batch_sequences(spec, training)
    shards = grid.data * grid.z
    if seqs % shards:
        raise WorkloadError(
            f"training.batch_tokens: {seqs} sequences are not divisible by data*z = {grid.data}*{grid.z} = {shards}"
        )
    return seqs // shards


def memory_for(
    spec: TransformerSpec, grid: Grid, params: AxonnParallel, training: TrainingSetup, mbs: int
) -> MemoryBreakdown:
    return axonn_memory(
        spec,
        grid,
        mbs,
        preset=preset_for(params),
        policy=weight_policy(params, spec.layers),
        checkpointing=training.activation_checkpointing,
        overlap=params.overlap,
        optimizer=training.optimizer,
        transpose_alternate=params.transpose_alternate,
        flash_attention=training.flash_attention,
    )


def axonn_calls(
    spec: TransformerSpec, grid: Grid, params: AxonnParallel, training: TrainingSetup, mbs: int
) -> AxonnCalls:
    """The collective description (schedule.py) of a grid at microbatch size `mbs`."""
    return AxonnCalls(
        spec,
        grid,
        preset_for(params),
        weight_policy(params, spec.layers),
        mbs * spec.seq_len,
        training.activation_checkpointing,
        params.transpose_alternate,
    )


def choose_microbatch(
    spec: TransformerSpec,
    grid: Grid,
    params: AxonnParallel,
    training: TrainingSetup,
    per_gpu: int,
    capacity_bytes: float,
) -> int:
    """The largest divisor of the per-GPU sequences whose memory fits (1 if none fits)."""
    best = 1
    for d in divisors(per_gpu):
        if memory_for(spec, grid, params, training, d).total <= capacity_bytes:
            best = d
    return best


def heuristic_grid(
    spec: TransformerSpec,
    params: AxonnParallel,
    training: TrainingSetup,
    gpus: int,
    gpus_per_node: int,
    capacity_bytes: float,
) -> Grid:
    """A simple valid grid: the smallest tensor-parallel size (powers of two) whose model
    states fit with microbatch 1, X inside a node, the rest over Z, data outside."""
    seqs = batch_sequences(spec, training)
    t = 1
    last_error: Exception | None = None
    while t <= gpus:
        if gpus % t == 0:
            x = min(t, gpus_per_node)
            while t % x:
                x //= 2
            grid = Grid(x=x, y=1, z=t // x, data=gpus // t)
            try:
                per_gpu = check_grid(spec, grid, params, training, gpus)
                if memory_for(spec, grid, params, training, 1).total <= capacity_bytes or t == gpus:
                    del per_gpu
                    return grid
            except WorkloadError as e:
                last_error = e
        t *= 2
    raise WorkloadError(f"no valid AxoNN grid for {gpus} GPUs and {seqs} sequences ({last_error})")


def build_axonn_workload(
    spec: TransformerSpec,
    params: AxonnParallel,
    grid: Grid,
    training: TrainingSetup,
    microbatch_sequences: int,
) -> OpGraph:
    """The OpGraph of one AxoNN training iteration on `grid`."""
    per_gpu = check_grid(spec, grid, params, training, grid.size)
    if per_gpu % microbatch_sequences:
        raise WorkloadError(
            f"training.microbatch_sequences={microbatch_sequences} does not divide the {per_gpu} sequences per GPU"
        )
    setup = AxonnSetup(
        grid=grid,
        microbatch_sequences=microbatch_sequences,
        microbatches=per_gpu // microbatch_sequences,
        oar="oar" in params.overlap,
        ors="ors" in params.overlap,
        oag="oag" in params.overlap,
        implementation=params.implementation,
        policy=weight_policy(params, spec.layers),
        expert_mode=params.expert_mode,
        checkpointing=training.activation_checkpointing,
        transpose_alternate=params.transpose_alternate,
        optimizer=training.optimizer,
        flash_attention=training.flash_attention,
        compress_microbatches=training.compress_microbatches,
        cross_entropy=training.cross_entropy or preset_for(params).cross_entropy,
    )
    program = build_axonn_program(spec, setup)
    world = grid.size
    return OpGraph(
        world_size=world,
        programs=(program,),
        rank_program=np.zeros(world, dtype=np.int64),
        groups=axonn_groups(grid),
        rank_class=np.zeros(world, dtype=np.int64),
        name=f"axonn-{spec.name}-{grid}",
        metadata={
            "strategy": "axonn",
            "grid": {"x": grid.x, "y": grid.y, "z": grid.z, "data": grid.data},
            "microbatches": setup.microbatches,
            "microbatch_sequences": microbatch_sequences,
            "overlap": list(params.overlap),
            "implementation": params.implementation,
            "weight_lifetime": setup.policy.label,
            "cached_layers": setup.policy.cached_blocks,
            # how the code version's framework creates its streams (which communicator
            # shares the compute stream's hardware queue on ROCm: simulator/cost/
            # interference.py)
            "stream_pool": preset_for(params).stream_pool,
            "communicators_before": preset_for(params).communicators_before,
        },
    )
