"""DeepSpeed's gradient path for ZeRO stages 0-2 on one rank, as its code runs it.

Sources (microsoft/DeepSpeed, commit 38327e0): deepspeed/runtime/bf16_optimizer.py,
deepspeed/runtime/zero/stage_1_and_2.py, deepspeed/runtime/engine.py.

- BF16_Optimizer (stage 0, or stage 1 with fp32 gradient accumulation): after every
  backward, `update_hp_grads` adds each bf16 gradient into the fp32 gradient buffer of
  the whole model; after the last microbatch the engine's `allreduce_gradients`
  (`buffered_allreduce_fallback`) all-reduces those fp32 buffers in buckets of at least
  5e8 elements (one bucket per flat buffer), cast to the communication dtype and back
  (`allreduce_bucket`), on the compute stream, after the backward; the step updates the
  fp32 partition and all-gathers the bf16 partitions (`update_lp_params`,
  `all_gather_dp_groups`: one all_gather_into_tensor).
- DeepSpeedZeroOptimizer (stages 1-2, bf16 accumulation): gradients are copied into the
  contiguous `ipg` bucket buffer (`reduce_independent_p_g_buckets_and_remove_grads`) and
  a full bucket (reduce_bucket_size elements) is reduced by `average_tensor`: divide,
  flatten the ranks' slices, and **all-reduce** the bucket (`allreduce_and_scatter` ->
  `allreduce_bucket`: DeepSpeed's stage 1/2 "reduce-scatter" is an all-reduce of which
  each rank keeps its slice), then copy its slice out. Stage 2 reduces during every
  backward from the gradient hooks; stage 1 at the gradient-accumulation boundary,
  after the backward (hooks only with overlap_comm). With overlap_comm the reduction
  runs on its own stream and the compute stream first waits for the previous reduction
  (`current_stream().wait_stream(reduction_stream)`); without it, on the compute stream.
  After the step: the bf16 partitions all-gathered (`all_gather_dp_groups`).
"""

from __future__ import annotations

from workloads.builder import comm_stream
from workloads.hybrid.frameworks import DeepSpeedRuntime
from workloads.hybrid.streams import StreamBuilder
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C

REDUCTION_STREAM = "ds:reduction"
FP32 = 4


class DeepSpeedGrads:
    """The gradient reduction and parameter all-gather of DeepSpeed stages 0-2.

    `units`: (name, elements) in the order their gradients become ready (backward);
    `dp`: the data-parallel group's size; `db`: the model's compute dtype bytes."""

    def __init__(
        self,
        b: StreamBuilder,
        rt: DeepSpeedRuntime,
        units: list[tuple[str, float]],
        db: int,
        dp: int,
        tag: str,
    ):
        self.b = b
        self.rt = rt
        self.units = dict(units)
        self.total = float(sum(e for _, e in units))
        self.db = db
        self.dp = dp
        self.tag = tag
        self.bucket: list[str] = []
        self.bucket_elems = 0.0
        self.count = 0
        self.last_reduction: int | None = None
        self.pending: list[int] = []

    @property
    def hooks(self) -> bool:
        """Whether gradients are reduced from the backward hooks (stage 2, or stage 1 with
        overlap_comm), rather than after the backward."""
        zero = self.rt.optimizer_path == "zero"
        return zero and (self.rt.stage == 2 or (self.rt.stage == 1 and self.rt.overlap_comm))

    # --------------------------------------------------------------- backward
    def ready(self, unit: str, last_mb: bool) -> None:
        """`unit`'s gradient is computed (its hook fires)."""
        if self.dp == 1 or not self.hooks or unit not in self.units:
            return
        if self.rt.stage == 1 and not last_mb:
            return
        self._add(unit)

    def backward_done(self, last_mb: bool) -> None:
        """End of one microbatch's backward: BF16_Optimizer accumulates into fp32 (every
        microbatch), hooked reductions flush their last bucket (the epilogue), and at the
        boundary stages 0/1 reduce everything after the backward."""
        if self.rt.optimizer_path == "bf16_optimizer":
            n = self.total
            self.b.compute(
                f"{self.tag}.bf16opt.update_hp_grads", C.ELEMENTWISE, n, (self.db + 2 * FP32) * n
            )
        if self.dp == 1:
            return
        if self.hooks and (self.rt.stage == 2 or last_mb):
            self._flush()
            self._epilogue()
        elif last_mb and self.rt.optimizer_path == "zero":
            for unit in self.units:
                self._add(unit)
            self._flush()
        elif last_mb:
            self._engine_allreduce()

    def _epilogue(self) -> None:
        """independent_gradient_partition_epilogue: synchronise the reduction stream."""
        if self.last_reduction is not None and self.rt.overlap_comm:
            self.b.wait(self.last_reduction, f"wait:{self.tag}.ipg_epilogue")
        self.last_reduction = None

    # -------------------------------------------------------- zero buckets
    def _add(self, unit: str) -> None:
        n = self.units[unit]
        if self.bucket and self.bucket_elems + n > self.rt.reduce_bucket_elems:
            self._flush()
        if self.rt.contiguous_gradients and n <= self.rt.reduce_bucket_elems:
            self.b.compute(f"{unit}.ds.ipg_copy", C.ELEMENTWISE, n, 2 * self.db * n)
        self.bucket.append(unit)
        self.bucket_elems += n

    def _flush(self) -> None:
        """average_tensor on the bucket: divide, flatten, all-reduce, copy the slice out."""
        if not self.bucket:
            return
        n, db, cb = self.bucket_elems, self.db, self.rt.comm_bytes
        name = f"{self.tag}.ipg{self.count}"
        self.count += 1
        overlap = self.rt.overlap_comm
        if overlap and self.last_reduction is not None:
            self.b.wait(self.last_reduction, f"wait:{self.tag}.reduction_stream")
        deps = self.b.last_compute()
        kernels = [("div", 2 * db * n), ("flatten", 2 * db * n)]
        if cb != db:
            kernels.append(("to_comm_dtype", (db + cb) * n))
        for what, nbytes in kernels:
            deps = (self._kernel(f"{name}.{what}", n, nbytes, overlap, deps),)
        ar = self.b.side_collective(
            f"{name}.ar_dp", K.ALL_REDUCE, "dp", n * cb, comm_stream("dp"), deps
        )
        out = self._kernel(f"{name}.copy_slice", n / self.dp, 2 * db * n / self.dp, overlap, (ar,))
        if overlap:
            self.last_reduction = out
            self.pending.append(out)
        else:
            self.b.wait(ar)
        self.bucket, self.bucket_elems = [], 0.0

    def _kernel(
        self, name: str, elems: float, nbytes: float, side: bool, deps: tuple[int, ...]
    ) -> int:
        if side:
            return self.b.side_compute(name, C.ELEMENTWISE, elems, nbytes, REDUCTION_STREAM, deps)
        return self.b.compute(name, C.ELEMENTWISE, elems, nbytes, deps=deps)

    # ------------------------------------------------------------ engine path
    def _engine_allreduce(self) -> None:
        """The engine's buffered_allreduce_fallback over the fp32 (BF16_Optimizer) or
        model-dtype (FP16_Optimizer) gradient buffer: one bucket of at least
        reduce... 5e8 elements (MEMORY_OPT_ALLREDUCE_SIZE) holds the whole flat buffer."""
        n = self.total
        gb = FP32 if self.rt.optimizer_path == "bf16_optimizer" else self.db
        cb = self.rt.comm_bytes
        name = f"{self.tag}.engine_allreduce"
        if cb != gb:
            self.b.compute(f"{name}.to_comm_dtype", C.ELEMENTWISE, n, (gb + cb) * n)
        self.b.compute(f"{name}.scale", C.ELEMENTWISE, n, 2 * cb * n)
        self.b.collective(f"{name}.ar_dp", K.ALL_REDUCE, "dp", n * cb)
        if cb != gb:
            self.b.compute(f"{name}.from_comm_dtype", C.ELEMENTWISE, n, (gb + cb) * n)

    # ---------------------------------------------------------------- step
    def finish(self) -> None:
        """Before the optimizer: wait for every outstanding reduction."""
        self.b.wait_all(self.pending, f"wait:{self.tag}.grads")
        self.last_reduction = None

    def after_step(self) -> None:
        """Copy the updated fp32 partition into the bf16 parameters and all-gather them
        (not the FP16_Optimizer, which updates every parameter on every GPU)."""
        if self.rt.optimizer_path == "fp16_optimizer" or self.dp == 1:
            return
        part = self.total / self.dp
        self.b.compute(f"{self.tag}.update_lp_params", C.ELEMENTWISE, part, (FP32 + self.db) * part)
        self.b.collective(f"{self.tag}.ag_dp", K.ALL_GATHER, "dp", self.total * self.db)
