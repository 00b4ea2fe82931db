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
from workloads.hybrid.deepspeed_pipe import Step, train_schedule
from workloads.hybrid.program import StageEmitter
from workloads.hybrid.schedule import Pass, schedule, steady_units
from workloads.hybrid.setup import HybridSetup
from workloads.hybrid.templates import PassTemplates
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.transformer import optimizer_step


def update_params(e: StageEmitter) -> float:
    """Parameters this rank's optimizer updates."""
    s, total = e.setup, float(e.counts["total"])
    if s.deepspeed is not None:  # every wrapper but the FP16_Optimizer partitions over dp
        return total if s.deepspeed.optimizer_path == "fp16_optimizer" else total / s.grad_ranks
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
    norms = ("ln1", "ln2")[: sp.block_norms]
    small = [(f"{ln}.w", sp.hidden) for ln in norms]
    if sp.norm_params > sp.hidden:  # LayerNorm with its bias
        small += [(f"{ln}.b", sp.hidden) for ln in norms]
    small += [(f"{lay.name}.bias", lay.bias_elems) for lay in e.blocks if lay.bias]
    for c in reversed(e.chunks):
        for layer in reversed(range(c.start, c.stop)):
            for name, elems in small:
                e.b.collective(f"L{layer}.{name}.ar_dp", K.ALL_REDUCE, "dp", elems * db)
    if any(c.last for c in e.chunks):
        e.b.collective("final_ln.ar_dp", K.ALL_REDUCE, "dp", sp.norm_params * db)
    if any(c.first for c in e.chunks) and sp.position_params:
        e.b.collective("pos_embedding.ar_dp", K.ALL_REDUCE, "dp", sp.position_params * db)
    if any(c.first for c in e.chunks) and sp.embedding_norm:
        e.b.collective("embedding_ln.ar_dp", K.ALL_REDUCE, "dp", sp.norm_params * db)


def finish_iteration(e: StageEmitter) -> None:
    """Everything after the last pass: gradient synchronisation and the optimizer."""
    s, b, sp = e.setup, e.b, e.spec
    b.phase = "grad-sync"
    if e.sharder is not None:
        e.sharder.wait_pending()
        if e.linear_mode and e.zero3 is None:
            small_param_sync(e)
    for bk in e.buckets.values():
        bk.finish()
    for dsg in e.ds_grads.values():
        dsg.finish()
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
        row_biases = sum(lay.bias_elems for lay in e.blocks if not lay.column)
        elems = layers * (sp.block_norms * sp.norm_params + row_biases)
        elems += sp.norm_params if last else 0
        e.tp_collective("sequence_parallel_grads.ar_tp", K.ALL_REDUCE, elems * s.grad_reduce_bytes)
    b.phase = "optimizer"
    optimizer_step(b, update_params(e), s.optimizer)
    if s.data_mode == "distopt" and not s.overlap_param_gather:
        for bk in e.buckets.values():
            bk.gather_params()
    for dsg in e.ds_grads.values():
        dsg.after_step()
    if e.zero3 is not None:
        e.zero3.after_step()
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
    if setup.pp == 1:
        _emit_microbatches(e, passes, copies)
    elif e.external_p2p:
        _emit_deepspeed_pipeline(e, setup)
    else:
        _emit_pipeline(e, passes, setup)
    finish_iteration(e)
    return e.b.build()


def _emit_passes(
    e: StageEmitter, passes: list[Pass], templates: PassTemplates | None = None
) -> None:
    for ps in passes:
        if templates is not None:
            templates.emit(ps)
        elif ps.kind == "F":
            e.forward_pass(ps)
        else:
            e.backward_pass(ps)


def _emit_microbatches(e: StageEmitter, passes: list[Pass], copies: list[int]) -> None:
    """No pipeline: each forward+backward pair is one microbatch segment."""
    for pair, i in enumerate(range(0, len(passes), 2)):
        e.b.begin_segment("microbatch", copies[pair] if pair < len(copies) else 1)
        _emit_passes(e, passes[i : i + 2])
        e.b.end_segment()


def _emit_step(e: StageEmitter, step: Step) -> None:
    """One TrainSchedule step: its blocking transfers, then its pass."""
    if step.send_grad >= 0:
        e.blocking_p2p("send_grad")
    if step.recv_act >= 0:
        e.blocking_p2p("recv_act")
    if step.recv_grad >= 0:
        e.blocking_p2p("recv_grad")
    if step.send_act >= 0:
        e.blocking_p2p("send_act")
    if step.kind == "F":
        e.forward_pass(Pass("F", 0, step.mb))
    elif step.kind == "B":
        e.backward_pass(Pass("B", 0, step.mb))


def _emit_deepspeed_pipeline(e: StageEmitter, setup: HybridSetup) -> None:
    """DeepSpeed's TrainSchedule, two steps (a forward and a backward) per segment; a
    segment that repeats the one before it stands for the following ones (as
    `_emit_pipeline` compresses Megatron's steady units)."""
    steps = train_schedule(setup.pp, e.last_index + 1, e.stage)
    prev: tuple[int, int, tuple[object, ...]] | None = None
    k = 0
    while k < len(steps):
        pair = steps[k : k + 2]
        key = tuple(
            (st.kind, st.send_grad >= 0, st.recv_act >= 0, st.recv_grad >= 0, st.send_act >= 0)
            for st in pair
        )
        regular = all(st.kind != "B" or st.mb != e.last_index for st in pair)
        start = len(e.b.ops)
        e.b.begin_segment(f"ds:{key}")
        for st in pair:
            _emit_step(e, st)
        e.b.end_segment()
        here = (start, len(e.b.ops) - start, key)
        k += 2
        if not regular:
            prev = None
            continue
        if (
            setup.compress_microbatches
            and prev is not None
            and prev[1:] == here[1:]
            and e.b.repeats(prev[0], here[0], here[1])
        ):
            stop = k
            while stop + 2 <= len(steps) and _same_pair(steps, stop, key, e.last_index):
                stop += 2
            if stop > k:
                e.b.repeat_last_segment(1 + (stop - k) // 2)
                k = stop
            prev = None
            continue
        prev = here


def _same_pair(steps: list[Step], at: int, key: tuple[object, ...], last: int) -> bool:
    pair = steps[at : at + 2]
    got = tuple(
        (st.kind, st.send_grad >= 0, st.recv_act >= 0, st.recv_grad >= 0, st.send_act >= 0)
        for st in pair
    )
    return got == key and all(st.kind != "B" or st.mb != last for st in pair)


def _pipeline_items(
    passes: list[Pass], setup: HybridSetup, last_index: int
) -> list[tuple[tuple[int, int], str, bool]]:
    """(pass range, segment key, regular) of each warm-up pass, steady unit and cool-down
    pass. Regular items are like their neighbours of the same key: everything but a
    backward of the last microbatch (whose gradients are reduced) or a short last unit."""
    units = steady_units(passes, setup.pp, setup.virtual_stages)

    def regular(a: int, b: int) -> bool:
        return all(ps.kind == "F" or ps.mb != last_index for ps in passes[a:b])

    def single(i: int) -> tuple[tuple[int, int], str, bool]:
        ps = passes[i]
        return ((i, i + 1), f"{ps.kind}{ps.chunk}", regular(i, i + 1))

    first = units[0][0] if units else len(passes)
    items = [single(i) for i in range(first)]
    width = units[0][1] - units[0][0] if units else 0
    items += [((a, b), "1f1b", b - a == width and regular(a, b)) for a, b in units]
    items += [single(i) for i in range(units[-1][1] if units else len(passes), len(passes))]
    return items


def _emit_pipeline(e: StageEmitter, passes: list[Pass], setup: HybridSetup) -> None:
    """Warm-up passes, steady units, cool-down passes, each a segment. Compressed: once an
    item repeats the one before it, that second item stands for itself and the following
    regular ones of its kind (Segment.repeat), so a stage's program holds its distinct
    work only. (The emitter's state is periodic from then on: emitting one more item to
    carry the repeat gave the second item shifted, tests/test_pipeline_compression.py.)"""
    items = _pipeline_items(passes, setup, e.last_index)
    templates = PassTemplates(e)
    prev: tuple[int, int, str] | None = None  # (first op, length, key) of the last item
    k = 0
    while k < len(items):
        (a, b), key, regular = items[k]
        start = len(e.b.ops)
        e.b.begin_segment(key)
        _emit_passes(e, passes[a:b], templates)
        e.b.end_segment()
        here = (start, len(e.b.ops) - start, key)
        k += 1
        if not regular:
            prev = None
            continue
        if (
            setup.compress_microbatches
            and prev is not None
            and prev[1:] == here[1:]
            and e.b.repeats(prev[0], here[0], here[1])
        ):
            stop = k
            while stop < len(items) and items[stop][2] and items[stop][1] == key:
                stop += 1
            if stop > k:
                # the emitter's state after this item is its state after the copies it
                # stands for, shifted: what follows is emitted as after the last copy
                e.b.repeat_last_segment(1 + stop - k)
                k = stop
            prev = None
            continue
        prev = here
