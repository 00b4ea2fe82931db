"""Build Optimus workloads: mesh groups, validation, mesh-size and microbatch choice."""

from __future__ import annotations

import numpy as np

from workloads.errors import WorkloadError
from workloads.graph import OpGraph
from workloads.groups import ProcessGroups
from workloads.models import TransformerSpec
from workloads.optimus.memory import optimus_memory
from workloads.optimus.params import OptimusParallel
from workloads.optimus.program import OptimusSetup, build_optimus_program
from workloads.run import ClusterShape, TrainingSetup, batch_sequences, divisors

NODE_BLOCK_GPUS = 4  # rank_rearrange: "for TACC, otherwise please not rank-rearrange"


def mesh_ranks(q: int, data: int, layout: str = "rows") -> np.ndarray:
    """GPU rank of every mesh position, shape (data, q, q) = (replica, row i, column j).

    'rows': rank = j + q·i + q²·replica. 'node-blocks': the released code's
    rank_rearrange (xuqifan897/Optimus summa/arguments.py, commit 79c67d8): the GPU of
    SLURM rank r serves mesh position (2·(b // (q/2)) + l // 2, 2·(b % (q/2)) + l % 2)
    with b = (r mod q²) // 4 its node within the replica and l = r mod 4 its GPU there,
    so each 4-GPU node holds a 2 x 2 block."""
    if layout == "rows":
        return np.arange(q * q * data, dtype=np.int64).reshape(data, q, q)
    i = np.arange(q)[:, None]
    j = np.arange(q)[None, :]
    block = (i // 2) * (q // 2) + j // 2
    local = (i % 2) * 2 + j % 2
    within = (block * NODE_BLOCK_GPUS + local).astype(np.int64)
    return np.stack([r * q * q + within for r in range(data)])


def optimus_groups(q: int, data: int, layout: str = "rows") -> ProcessGroups:
    """row (same mesh row), col (same mesh column) and dp (the same mesh position in
    every replica), members in mesh order, placed by `layout` (mesh_ranks)."""
    ranks = mesh_ranks(q, data, layout)
    return ProcessGroups(
        q * q * data,
        {
            "row": ranks.reshape(-1, q),
            "col": ranks.transpose(0, 2, 1).reshape(-1, q),
            "dp": ranks.transpose(1, 2, 0).reshape(-1, data),
        },
    )


def check_mesh(spec: TransformerSpec, q: int, gpus: int, data: int | None) -> int:
    """Validate the mesh against the model and GPU count; return the replica count."""
    if data is None:
        if gpus % (q * q):
            raise WorkloadError(f"parallel.q: q^2 = {q * q} does not divide the {gpus} GPUs")
        data = gpus // (q * q)
    if q * q * data != gpus:
        raise WorkloadError(
            f"parallel: q^2 x data = {q * q} x {data} = {q * q * data} does not equal the {gpus} GPUs"
        )
    kv = spec.kv_heads or spec.heads
    for value, what in (
        (spec.hidden, "hidden size"),
        (spec.heads, "attention heads"),
        (kv, "key/value heads"),
        (spec.ffn, "MLP width"),
    ):
        if value % q:
            raise WorkloadError(f"parallel.q={q} does not divide the model's {what} ({value})")
    return data


def optimus_setup(
    spec: TransformerSpec,
    params: OptimusParallel,
    training: TrainingSetup,
    gpus: int,
    q: int,
    microbatch_sequences: int,
) -> OptimusSetup:
    """A validated setup for mesh side q and a per-mesh microbatch."""
    data = check_mesh(spec, q, gpus, params.data)
    if params.mesh_layout == "node-blocks" and q % 2:
        raise WorkloadError(
            f"parallel.mesh_layout=node-blocks puts a 2 x 2 block of the mesh on each node; "
            f"q={q} is odd"
        )
    seqs = batch_sequences(spec, training)
    if seqs % data:
        raise WorkloadError(
            f"training.batch_tokens: {seqs} sequences are not divisible by the {data} replicas"
        )
    per_replica = seqs // data
    if microbatch_sequences % q or per_replica % microbatch_sequences:
        raise WorkloadError(
            f"training.microbatch_sequences={microbatch_sequences} must be a multiple of q={q} "
            f"dividing the {per_replica} sequences per replica"
        )
    return OptimusSetup(
        q=q,
        data=data,
        microbatch_sequences=microbatch_sequences,
        microbatches=per_replica // microbatch_sequences,
        checkpointing=training.activation_checkpointing,
        prefetch_broadcasts=params.prefetch_broadcasts,
        optimizer=training.optimizer,
        flash_attention=training.flash_attention,
        compress_microbatches=training.compress_microbatches,
        bucket_elems=max(40_000_000, 1_000_000 * data),
        mesh_layout=params.mesh_layout,
    )


def candidate_optimus_setups(
    spec: TransformerSpec, params: OptimusParallel, training: TrainingSetup, cluster: ClusterShape
) -> list[OptimusSetup]:
    """Every valid (q, microbatch) configuration, smallest mesh first."""
    if params.mesh_layout == "node-blocks" and cluster.gpus_per_node != NODE_BLOCK_GPUS:
        raise WorkloadError(
            f"parallel.mesh_layout=node-blocks is the released code's rank_rearrange for "
            f"{NODE_BLOCK_GPUS}-GPU nodes (this machine has {cluster.gpus_per_node} per node)"
        )
    qs = (
        [params.q] if params.q else [q for q in range(1, cluster.gpus + 1) if q * q <= cluster.gpus]
    )
    seqs = batch_sequences(spec, training)
    out = []
    for q in qs:
        try:
            data = check_mesh(spec, q, cluster.gpus, params.data)
        except WorkloadError:
            continue
        if seqs % data:
            continue
        per = seqs // data
        mbs = [training.microbatch_sequences] if training.microbatch_sequences else divisors(per)
        for m in mbs:
            try:
                out.append(optimus_setup(spec, params, training, cluster.gpus, q, m))
            except WorkloadError:
                continue
    return out


def choose_optimus_setup(
    spec: TransformerSpec, params: OptimusParallel, training: TrainingSetup, cluster: ClusterShape
) -> OptimusSetup:
    """The smallest mesh (q > 1 when the GPU count allows) that fits, largest fitting
    microbatch; raises WorkloadError naming the field if no configuration is valid."""
    setups = candidate_optimus_setups(spec, params, training, cluster)
    if not setups:
        q = params.q or 1
        optimus_setup(spec, params, training, cluster.gpus, q, training.microbatch_sequences or q)
        raise WorkloadError(f"parallel: no valid Optimus mesh for {cluster.gpus} GPUs")
    meshes = sorted({s.q for s in setups}, key=lambda q: (q == 1, q))
    for q in meshes:
        fit = [
            s
            for s in setups
            if s.q == q and optimus_memory(spec, s).total <= cluster.capacity_bytes
        ]
        if fit:
            return max(fit, key=lambda s: s.microbatch_sequences)
    return min(setups, key=lambda s: optimus_memory(spec, s).total)


def build_optimus_workload(spec: TransformerSpec, setup: OptimusSetup) -> OpGraph:
    """The OpGraph of one Optimus iteration (one program, one rank class)."""
    check_mesh(spec, setup.q, setup.world, setup.data)
    program = build_optimus_program(spec, setup)
    world = setup.world
    return OpGraph(
        world_size=world,
        programs=(program,),
        rank_program=np.zeros(world, dtype=np.int64),
        groups=optimus_groups(setup.q, setup.data, setup.mesh_layout),
        rank_class=np.zeros(world, dtype=np.int64),
        name=f"optimus-{spec.name}-q{setup.q}-d{setup.data}",
        metadata={"strategy": "optimus", "q": setup.q, "data": setup.data},
    )
