"""PyTorch FSDP's hooks on one rank, as torch/distributed/fsdp runs them.

FSDP1 (FullyShardedDataParallel, torch/distributed/fsdp/_runtime_utils.py and
_flat_param.py, torch 2.x):

- `_unshard`: on the pre-unshard stream, the fp32 shard is cast to the compute dtype
  (`_use_low_precision_shard`, a kernel over the shard); with `limit_all_gathers` the CPU
  first waits for the oldest of the free events once two are queued
  (`_FreeEventQueue.dequeue_if_needed`, `_max_num_inflight_all_gathers = 2`); then the
  all-gather runs from the unshard stream: it waits for nothing on the compute stream
  (ProcessGroupNCCL syncs its stream with the *current* stream, the unshard stream).
  The compute stream waits for it before the unit runs (`wait_stream(unshard_stream)`).
- `_reshard` after a unit's forward (FULL_SHARD / HYBRID_SHARD, not the root) and after
  its backward records a free event on the compute stream and queues it.
- Prefetch: forward (`forward_prefetch`) in a unit's pre-forward hook, backward in its
  pre-backward hook (BACKWARD_PRE) or after its gradient (BACKWARD_POST), the target
  being the previous unit in post-forward order (the root's is the last block).
- `_post_backward_hook` on the post-backward stream (which waits for the compute
  stream): the gradient cast to reduce_dtype, the pre-divide kernel, the reduce-scatter
  (NO_SHARD: all-reduce), for HYBRID_SHARD an all-reduce of the shard on the inter-node
  process group's own stream, the post-divide kernel and the accumulation into the
  sharded gradient. Every collective of one process group runs on ProcessGroupNCCL's one
  stream, so all-gathers and reduce-scatters of the shard group serialise.
- The root (embedding, final norm, output layer: what no auto-wrap unit took) is not
  resharded after forward; it is resharded and reduced after the whole backward.
- Where the kernels run: a GPU hands out thread blocks in the order kernels were
  submitted, whatever their stream ("The GPU will distribute work to SMs in the order the
  kernels were submitted ... concurrent work can complete out of order but will always be
  distributed in order", Greg Smith, NVIDIA, stackoverflow.com/questions/11874244). The
  post-backward hook's kernels before the reduce-scatter (the cast to reduce_dtype, the
  pre-divide; FSDP2's copy-in) wait on the compute stream's last kernel and are
  submitted beside the next unit's backward kernels: their many blocks (one element-wise
  pass over the unit's whole gradient) are dispatched between those kernels' blocks and
  take the SMs for their duration, so they are priced on the compute stream, in that
  order, instead of beside it for free. The kernels after the reduce-scatter (post-divide,
  cast to fp32, accumulation: a shard each) stay on the side stream: they become ready
  when the collective ends, not at a point of the compute stream's order.

FSDP2 (fully_shard, torch/distributed/fsdp/_fully_shard): no rate limiter; the
all-gather copy-in (cast the fp32 shards into the send buffer) runs on its own stream
and, in forward, waits for the previous unit's copy-out (`all_gather_state`), so the
next unit's gather overlaps the current unit; the copy-out (`split_with_sizes_copy`)
runs on the compute stream; backward prefetches one unit explicitly; the reduce-scatter
copy-in (`chunk_cat`, cast to reduce_dtype) runs on the reduce-scatter stream, NCCL
divides (no divide kernels), and before a unit's reduction the compute stream waits for
the previous one (`reduce_scatter_max_input_buffers` = 1).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from workloads.builder import comm_stream
from workloads.hybrid.frameworks import FsdpRuntime
from workloads.hybrid.groups import group_size
from workloads.hybrid.setup import HybridSetup
from workloads.hybrid.streams import StreamBuilder
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C

MAX_INFLIGHT_ALL_GATHERS = 2  # torch/distributed/fsdp/_limiter_utils.py ("empirically chosen")
PRE_UNSHARD_STREAM = "fsdp:pre_unshard"
POST_BACKWARD_STREAM = "fsdp:post_backward"
COPY_IN_STREAM = "fsdp:all_gather_copy_in"
REDUCE_SCATTER_STREAM = "fsdp:reduce_scatter"
FP32 = 4


def predivide_factor(world: int) -> int:
    """FSDP1's gradient pre-divide factor (_init_utils._get_gradient_predivide_factor):
    from 1, doubled while it divides `world` and world / factor > factor (so about
    sqrt(world); 4 for a world of 6)."""
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return factor


class FsdpHooks:
    """FSDP's pre/post forward/backward hooks for one rank's units.

    `order`: the units in pre-forward order (the root first); `elems(unit)`: its
    parameters (the unsharded flat parameter's elements); `compute_bytes`: the
    mixed-precision compute dtype (MixedPrecision.param_dtype)."""

    def __init__(
        self,
        b: StreamBuilder,
        setup: HybridSetup,
        rt: FsdpRuntime,
        compute_bytes: int,
        order: list[str],
        elems: Callable[[str], float],
    ):
        self.b = b
        self.rt = rt
        self.db = compute_bytes
        self.order = order
        self.elems = elems
        self.shard = group_size(setup, "shard")
        self.replicate = group_size(setup, "replicate")
        self.root = order[0]
        self.last_block = order[-1] if len(order) > 1 else None
        self.gathering: dict[str, int] = {}  # unit -> its all-gather (not yet waited)
        self.ready: set[str] = set()  # units unsharded and waited by the compute stream
        self.free_events: deque[int] = deque()  # FSDP1 rate limiter queue
        self.copy_out: int | None = None  # FSDP2: the last forward copy-out
        self.last_rs: int | None = None  # FSDP2: the last reduce-scatter (back-pressure)
        self.pending: list[int] = []  # reductions the final callback waits for
        self.microbatch = 0  # backward passes run so far (the first one does not accumulate)
        # the root's pre-forward makes the unshard streams wait for the compute stream
        # (FSDP1 _root_pre_forward -> _wait_for_computation_stream; FSDP2 likewise)
        self.sync_with_compute = False
        # units whose pre-forward / pre-backward hook has not run in this pass: the only
        # valid prefetch targets (FSDP's _needs_pre_forward_unshard / _needs_pre_backward_unshard)
        self.forward_left: set[str] = set(order)
        self.backward_left: set[str] = set()

    # ------------------------------------------------------------- helpers
    def _forward_next(self, unit: str) -> str | None:
        i = self.order.index(unit)
        return self.order[i + 1] if i + 1 < len(self.order) else None

    def _backward_next(self, unit: str) -> str | None:
        """The previous unit in post-forward order (blocks in order, then the root)."""
        post = [*self.order[1:], self.root]
        i = post.index(unit)
        return post[i - 1] if i > 0 else None

    def _last_compute(self) -> int | None:
        got = self.b.last_compute()
        return got[0] if got else None

    # ------------------------------------------------------------- unshard
    def _unshard(self, unit: str) -> None:
        """Issue `unit`'s all-gather (nothing if it is unsharded or on its way)."""
        if unit in self.ready or unit in self.gathering:
            return
        if self.rt.no_shard or self.shard == 1:
            self.ready.add(unit)
            return
        n = self.elems(unit)
        shard = n / self.shard
        deps: list[int] = []
        after: tuple[int, ...] = ()
        if self.sync_with_compute:
            after = self.b.last_compute()
            self.sync_with_compute = False
        if self.rt.version == 1:
            if self.rt.shard_param_bytes != self.db:
                deps.append(
                    self.b.side_compute(
                        f"{unit}.fsdp.mp_shard_cast",
                        C.ELEMENTWISE,
                        shard,
                        (self.rt.shard_param_bytes + self.db) * shard,
                        PRE_UNSHARD_STREAM,
                        after,
                    )
                )
            else:
                deps.extend(after)
            if self.rt.limit_all_gathers and len(self.free_events) >= MAX_INFLIGHT_ALL_GATHERS:
                deps.append(self.free_events.popleft())
        else:
            if self.copy_out is not None:
                after = (*after, self.copy_out)
            deps.append(
                self.b.side_compute(
                    f"{unit}.fsdp.all_gather_copy_in",
                    C.ELEMENTWISE,
                    shard,
                    (self.rt.shard_param_bytes + self.db) * shard,
                    COPY_IN_STREAM,
                    after,
                )
            )
        self.gathering[unit] = self.b.side_collective(
            f"{unit}.ag_shard",
            K.ALL_GATHER,
            "shard",
            n * self.db,
            comm_stream("shard"),
            tuple(deps),
        )

    def _wait(self, unit: str, forward: bool) -> None:
        """The compute stream waits for `unit`'s gather (FSDP2: and copies it out; in
        forward the next gather's copy-in waits for this copy-out)."""
        if unit in self.ready:
            return
        self._unshard(unit)
        if unit in self.ready:
            return
        self.b.wait(self.gathering.pop(unit))
        if self.rt.version == 2:
            n = self.elems(unit)
            out = self.b.compute(
                f"{unit}.fsdp.all_gather_copy_out", C.ELEMENTWISE, n, 2 * self.db * n
            )
            self.copy_out = out if forward else None
        self.ready.add(unit)

    def _reshard(self, unit: str) -> None:
        """Free `unit`'s unsharded parameters (FSDP1: queue the free event)."""
        if self.rt.no_shard or self.shard == 1 or unit not in self.ready:
            return
        self.ready.discard(unit)
        at = self._last_compute()
        if self.rt.version == 1 and self.rt.limit_all_gathers and at is not None:
            self.free_events.append(at)

    # --------------------------------------------------------------- hooks
    def pre_forward(self, unit: str) -> None:
        """A unit's pre-forward hook (the recompute of a checkpointed unit runs none)."""
        if unit == self.root:
            self.sync_with_compute = True
            # every free event queued so far precedes the compute the root's gather now
            # waits for: the limiter's waits on them are already satisfied
            self.free_events.clear()
            self.forward_left = set(self.order)
        self.forward_left.discard(unit)
        self.backward_left.add(unit)
        self._wait(unit, forward=True)
        nxt = self._forward_next(unit)
        if self.rt.forward_prefetch and nxt is not None and nxt in self.forward_left:
            self._unshard(nxt)

    def post_forward(self, unit: str) -> None:
        """A unit's post-forward hook: reshard, except the root, under SHARD_GRAD_OP and,
        under FSDP2 as torchtitan wraps it, the last block."""
        keep = unit == self.root or not self.rt.reshard_after_forward
        if self.rt.keep_last_unit and unit == self.last_block:
            keep = True
        if not keep:
            self._reshard(unit)

    def pre_backward(self, unit: str) -> None:
        """A unit's pre-backward hook: unshard it, prefetch the next (BACKWARD_PRE)."""
        self.copy_out = None
        self.backward_left.discard(unit)
        self._wait(unit, forward=False)
        nxt = self._backward_next(unit)
        nxt = nxt if nxt in self.backward_left else None
        mode = self.rt.backward_prefetch
        # FSDP2 prefetches one unit in its pre-backward hook (it has no POST mode)
        if nxt is not None and (mode == "pre" or (mode == "post" and self.rt.version == 2)):
            self._unshard(nxt)

    def post_backward(self, unit: str) -> None:
        """A unit's post-backward hook: reshard, prefetch (BACKWARD_POST), reduce."""
        self._reshard(unit)
        nxt = self._backward_next(unit)
        nxt = nxt if nxt in self.backward_left else None
        if nxt is not None and self.rt.backward_prefetch == "post" and self.rt.version == 1:
            self._unshard(nxt)
        if self.rt.version == 1:
            self._reduce_fsdp1(unit)
        else:
            self._reduce_fsdp2(unit)

    def final_callback(self) -> None:
        """After a backward: the compute stream waits for every reduction."""
        self.b.wait_all(self.pending, "wait:fsdp.post_backward")
        self.last_rs = None
        self.copy_out = None
        self.microbatch += 1

    # -------------------------------------------------------------- reduce
    def _side(
        self,
        unit: str,
        what: str,
        elems: float,
        nbytes: float,
        stream: str,
        deps: tuple[int, ...] = (),
    ) -> int:
        return self.b.side_compute(
            f"{unit}.fsdp.{what}", C.ELEMENTWISE, elems, nbytes, stream, deps
        )

    def _in_order(self, unit: str, what: str, elems: float, nbytes: float) -> int:
        """A post-backward kernel that waits on the compute stream's last kernel and whose
        blocks the GPU dispatches before the next kernels' (module docstring): it takes
        its time out of the compute stream's."""
        return self.b.compute(f"{unit}.fsdp.{what}", C.ELEMENTWISE, elems, nbytes)

    def _reduce_collectives(
        self, unit: str, n: float, rb: float, deps: tuple[int, ...], no_shard: bool
    ) -> tuple[int, int, float]:
        """A unit's gradient collectives: an all-reduce over the replicas where nothing is
        sharded, else a reduce-scatter over the shard group and (HYBRID_SHARD) an
        all-reduce of the shard over the replicas. Returns (the first collective, the
        last, the elements each rank keeps)."""
        if no_shard or self.shard == 1:
            first = self.b.side_collective(
                f"{unit}.ar_replicate",
                K.ALL_REDUCE,
                "replicate",
                n * rb,
                comm_stream("replicate"),
                deps,
            )
            return first, first, n
        first = self.b.side_collective(
            f"{unit}.rs_shard", K.REDUCE_SCATTER, "shard", n * rb, comm_stream("shard"), deps
        )
        out = n / self.shard
        if self.replicate == 1:
            return first, first, out
        tail = self.b.side_collective(
            f"{unit}.ar_replicate",
            K.ALL_REDUCE,
            "replicate",
            out * rb,
            comm_stream("replicate"),
            (first,),
        )
        return first, tail, out

    def _reduce_fsdp1(self, unit: str) -> None:
        n, rb = self.elems(unit), self.rt.reduce_bytes
        s = POST_BACKWARD_STREAM
        deps = self.b.last_compute()
        if rb != self.db:  # in dispatch order with the compute stream (module docstring)
            deps = (self._in_order(unit, "grad_cast", n, (self.db + rb) * n),)
        world = self.shard * self.replicate if self.rt.no_shard else self.shard
        pre = predivide_factor(world)
        if pre > 1:
            deps = (self._in_order(unit, "grad_predivide", n, 2 * rb * n),)
        _, tail, out = self._reduce_collectives(unit, n, rb, deps, self.rt.no_shard)
        self.pending.append(tail)  # the collective (the final callback's wait names it)
        post = world // pre
        if post > 1:
            tail = self._side(unit, "grad_postdivide", out, 2 * rb * out, s, (tail,))
        if rb != FP32:
            tail = self._side(unit, "grad_to_fp32", out, (rb + FP32) * out, s, (tail,))
        if self.microbatch > 0:
            tail = self._side(unit, "grad_accumulate", out, 3 * FP32 * out, s, (tail,))
        self.pending.append(tail)

    def _reduce_fsdp2(self, unit: str) -> None:
        n, rb = self.elems(unit), self.rt.reduce_bytes
        if self.last_rs is not None:
            self.b.wait(self.last_rs, "wait:fsdp.reduce_scatter_buffer")
        s = REDUCE_SCATTER_STREAM
        # in dispatch order with the compute stream (module docstring)
        deps = (self._in_order(unit, "reduce_scatter_copy_in", n, (self.db + rb) * n),)
        self.last_rs, tail, out = self._reduce_collectives(unit, n, rb, deps, False)
        self.pending.append(tail)
        if rb != FP32:
            tail = self._side(unit, "grad_to_fp32", out, (rb + FP32) * out, s, (tail,))
        if self.microbatch > 0:
            tail = self._side(unit, "grad_accumulate", out, 3 * FP32 * out, s, (tail,))
        self.pending.append(tail)
