"""Assembling one stage's iteration: its passes in schedule order, then the gradient
synchronisation and the optimizer step.

After the last pass: the outstanding ZeRO/FSDP reductions are waited (per-linear ZeRO-3
then all-reduces the replicated biases and LayerNorms over the data-parallel group, per
tensor), Megatron's buckets finish, tied word embeddings are all-reduced between the
first and last stage, sequence-parallel LayerNorm and row-bias gradients over the
tensor-parallel group, and the optimizer updates the parameters this rank owns
(distributed optimizer / shards: its share); the distributed optimizer then all-gathers
the parameters (unless overlapped with the next iteration) and a node/pair ZeRO++ forward
partition is rebuilt.
"""

from __future__ import annotations

from workloads.builder import microbatch_copies
from workloads.graph import Program
from workloads.hybrid.program import StageEmitter
from workloads.hybrid.schedule import schedule
from workloads.hybrid.setup import HybridSetup
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.transformer import optimizer_step


def update_params(e: StageEmitter) -> float:
    """Parameters this rank's optimizer updates."""
    s, total = e.setup, float(e.counts["total"])
    if s.data_mode == "distopt":
        return total / s.grad_ranks
    if not s.sharded:
        return total
    if e.linear_mode:
        small = float(e.counts["small"])
        return (total - small) / s.shard + small
    return total / s.shard


def small_param_sync(e: StageEmitter) -> None:
    """Per-linear ZeRO-3: the replicated small parameters' gradients over 'dp'."""
    sp, db = e.spec, e.db
    if e.setup.dp == 1:
        return
    small = [("ln1.w", sp.hidden), ("ln2.w", sp.hidden)]
    if sp.norm == "layernorm":
        small += [("ln1.b", sp.hidden), ("ln2.b", sp.hidden)]
    small += [(f"{lay.name}.bias", lay.bias_elems) for lay in e.blocks if lay.bias]
    for c in reversed(e.chunks):
        for layer in reversed(range(c.start, c.stop)):
            for name, elems in small:
                e.b.collective(f"L{layer}.{name}.ar_dp", K.ALL_REDUCE, "dp", elems * db)
    if any(c.last for c in e.chunks):
        e.b.collective("final_ln.ar_dp", K.ALL_REDUCE, "dp", sp.norm_params * db)
    if any(c.first for c in e.chunks) and sp.position_params:
        e.b.collective("pos_embedding.ar_dp", K.ALL_REDUCE, "dp", sp.position_params * db)


def finish_iteration(e: StageEmitter) -> None:
    """Everything after the last pass: gradient synchronisation and the optimizer."""
    s, b, sp = e.setup, e.b, e.spec
    b.phase = "grad-sync"
    if e.sharder is not None:
        e.sharder.wait_pending()
        if e.linear_mode:
            small_param_sync(e)
    for bk in e.buckets.values():
        bk.finish()
    if s.pp > 1 and e.stage in (0, s.pp - 1) and sp.tied_embeddings:
        grad_bytes = e.db if s.sharded else s.grad_reduce_bytes
        shard = s.shard if s.sharded else 1
        b.collective(
            "embedding.ar_embed",
            K.ALL_REDUCE,
            "embed",
            e.lg.weight_elems / shard * grad_bytes,
        )
    if e.sp:
        layers = sum(c.stop - c.start for c in e.chunks)
        last = any(c.last for c in e.chunks)
        # norms and row-parallel biases: the parameters sequence parallelism replicates
        row_biases = 2 * sp.hidden if sp.bias else 0
        elems = layers * (2 * sp.norm_params + row_biases) + (sp.norm_params if last else 0)
        e.tp_collective("sequence_parallel_grads.ar_tp", K.ALL_REDUCE, elems * s.grad_reduce_bytes)
    b.phase = "optimizer"
    optimizer_step(b, update_params(e), s.optimizer)
    if s.data_mode == "distopt" and not s.overlap_param_gather:
        for bk in e.buckets.values():
            bk.gather_params()
    if e.sharder is not None:
        e.sharder.refresh_forward_partition(
            e.counts["total"] - (e.counts["small"] if e.linear_mode else 0)
        )


def build_stage_program(spec: TransformerSpec, setup: HybridSetup, stage: int) -> Program:
    """The program every rank of pipeline stage `stage` runs for one iteration."""
    e = StageEmitter(spec, setup, stage)
    if setup.data_mode == "distopt" and setup.overlap_param_gather:
        for c in e.chunks:
            if c.index in e.buckets:
                e.buckets[c.index].prefetch_params()
    # without a pipeline every microbatch is one identical forward+backward pair: emit the
    # first, one standing for the middle ones, and the last (see Segment.repeat)
    copies = microbatch_copies(setup.microbatches, setup.compress_microbatches and setup.pp == 1)
    emitted = setup.microbatches if setup.pp > 1 else len(copies)
    e.last_index = emitted - 1
    passes = schedule(setup.pp, emitted, setup.virtual_stages, stage)
    key = "microbatch" if setup.pp == 1 else "1f1b"
    i = 0
    pair = 0
    while i < len(passes):
        ps = passes[i]
        paired = ps.steady and i + 1 < len(passes) and passes[i + 1].steady
        if paired:
            e.b.begin_segment(key, copies[pair] if setup.pp == 1 and pair < len(copies) else 1)
            pair += 1
            e.forward_pass(ps)
            e.backward_pass(passes[i + 1])
            e.b.end_segment()
            i += 2
            continue
        if ps.kind == "F":
            e.forward_pass(ps)
        else:
            e.backward_pass(ps)
        i += 1
    finish_iteration(e)
    return e.b.build()
