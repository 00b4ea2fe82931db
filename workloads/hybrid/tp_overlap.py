"""Tensor-parallel communication overlap: Megatron-Core's --tp-comm-overlap through
Transformer Engine's userbuffers.

Why: with sequence parallelism every block's linear layers all-gather their input and
reduce-scatter their output over the tensor-parallel group; without overlap (NCCL, the
default path in workloads/hybrid/program.py) the forward gathers and reductions sit on
the critical path. With `tp_comm_overlap` TE splits each of them into chunks that run
beside the GEMM, by one of three methods per GEMM (transformer_engine/pytorch/module/
base.py `initialize_ub`, the defaults Megatron-LM passes when --tp-comm-overlap-cfg is
not given; the kernels in transformer_engine/common/comm_gemm_overlap/
comm_gemm_overlap.cpp):

| TE GEMM | here | method | comm |
|---|---|---|---|
| qkv_fprop, fc1_fprop | column forward | ring_exchange | input all-gather |
| proj_dgrad, fc2_dgrad | row backward dI | ring_exchange | output-gradient all-gather |
| proj_fprop, fc2_fprop | row forward | pipeline | output reduce-scatter |
| qkv_dgrad, fc1_dgrad | column backward dI | bulk | input all-gather (for wgrad) |
| qkv_wgrad, fc1_wgrad | column backward dW | bulk | dI reduce-scatter |
| proj_wgrad, fc2_wgrad | row backward dW | external | (the ring's gathered copy) |

- ring_exchange (`split_overlap_ag`): tp steps; at step i the GEMM runs on the chunk in
  hand (m/tp rows) while the chunk is passed to the next rank and the next one received
  (`userbuffers_send/recv`, `use_ce`: copy engines, no SMs; `set_sm_margin` off: the
  GEMMs use every SM). Step i+1's GEMM waits for step i's receive.
- pipeline (`split_overlap_rs`, num_splits = 4): the GEMM in 4 row chunks, each chunk's
  reduce-scatter (`reducescatter2_userbuff_stridedoutput`, num_sm = 16 SMs) beside the
  next chunk's GEMM; the last one exposed; the main stream waits for all of it.
- bulk (`bulk_overlap`): the whole collective (16 SMs) beside one GEMM.
- pipeline and bulk launch their GEMMs with `set_sm_margin`: cuBLASLt gets sm_count - 16
  SMs (`_math_sms`), priced by simulator/cost/sm_share.py through the ops' `sm_margin`.
- the row-parallel forward may instead use ring_exchange (`split_overlap_rs_p2p`, as
  NVIDIA's tuned H100 configurations in Megatron-Bridge's comm_overlap.py do): tp GEMM
  chunks, each sent straight to the rank that owns those rows beside the next chunk's
  GEMM (copy engines), then one kernel sums the tp partials.

Userbuffers collectives are launched from TE's C++ (no c10d work objects): they run on
their own streams (`UB_STREAMS`), which the kernel model prices at a kernel launch's host
cost. Each carries the SMs it holds (`CollectiveOp.sms`: num_sm for pipeline and bulk,
none for copy-engine ring exchanges), which the interference model takes as its footprint
instead of NCCL's channels; a GEMM with an SM margin loses nothing to those that fit in
its margin (simulator/cost/interference.py, one place for both). FP8 (workloads/fp8.py): the all-gathered buffers are FP8 (`fp8_buf` for the
all-gather layers), the reduce-scatters bf16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workloads.hybrid.setup import TpLinear, TpOverlapSetup
from workloads.ops import USERBUFFERS_STREAM_PREFIX
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C

if TYPE_CHECKING:
    from workloads.fp8 import LinearPrecision
    from workloads.hybrid.streams import StreamBuilder

UB_P2P_STREAM = f"{USERBUFFERS_STREAM_PREFIX}:p2p"  # ring exchanges (send + receive)
UB_COMM_STREAM = f"{USERBUFFERS_STREAM_PREFIX}:comm"  # pipeline and bulk collectives
UB_STREAMS = (UB_P2P_STREAM, UB_COMM_STREAM)
CE_SMS = 0
"""SMs a ring exchange holds: the copy engines move the data (use_ce, cudaMemcpyAsync)
and the flag kernels are single-thread blocks (userbuffers.cu `userbuffers_send` with
signalonly: SETUP_LAUNCH_CONFIG(1, 1); push-mode `kuserbuffers_pushrecv<<<1, 1>>>`) that
fit beside a GEMM's CTA on its SM. Pipeline and bulk kernels launch `num_sm` blocks of
1,024 threads: whole SMs (their `sms`)."""


class TpOverlap:
    """Emits the block linears' forward and backward with userbuffers overlap."""

    def __init__(
        self,
        builder: StreamBuilder,
        prec: LinearPrecision,
        cfg: TpOverlapSetup,
        tp: int,
        tokens: int,
        db: int,
    ):
        self.b = builder
        self.prec = prec
        self.cfg = cfg
        self.t = tp
        self.M = tokens  # tokens per GPU before the sequence-parallel split
        self.db = db

    @staticmethod
    def handles(lay: TpLinear) -> bool:
        """TE's layers (the block's); the output layer is Megatron's own (NCCL)."""
        return lay.name != "logits"

    # ------------------------------------------------------------- methods
    def _ring_gemm(self, tag: str, lay: TpLinear, n: int, k: int, ex_bytes: float) -> None:
        """ring_exchange: tp GEMM steps of M/tp rows, step i beside exchange i."""
        b, rows = self.b, self.M // self.t
        prev = b.last_compute()
        for i in range(self.t):
            h = None
            if i < self.t - 1:
                h = b.side_collective(
                    f"{tag}.ub_ag{i}",
                    K.RING_EXCHANGE,
                    "tp",
                    ex_bytes,
                    UB_P2P_STREAM,
                    prev,
                    sms=CE_SMS,
                )
                prev = ()
            self.prec.gemm(f"{tag}{i}", lay.name, rows, n, k)
            if h is not None:
                b.wait(h)

    def _pipeline_gemm(self, tag: str, lay: TpLinear) -> None:
        """pipeline: num_splits row chunks, chunk i's reduce-scatter beside chunk i+1."""
        b, splits = self.b, self.cfg.pipeline_splits
        rows = self.M // splits
        h = -1
        for i in range(splits):
            g = self.prec.gemm(
                f"{tag}.fwd{i}", lay.name, rows, lay.n_local, lay.k_local, self.cfg.margin
            )
            h = b.side_collective(
                f"{tag}.ub_rs{i}.fwd",
                K.REDUCE_SCATTER,
                "tp",
                rows * lay.n * self.db,
                UB_COMM_STREAM,
                (g,),
                sms=self.cfg.comm_sms,
            )
        b.wait(h)

    def _ring_rs_gemm(self, tag: str, lay: TpLinear) -> None:
        """ring_exchange reduce-scatter (`split_overlap_rs_p2p`): tp GEMM chunks, each
        the partial rows of one destination rank; chunk i's send beside chunk i+1 (the
        last chunk is this rank's own); then one kernel sums the tp partials."""
        b, rows = self.b, self.M // self.t
        chunk = rows * lay.n * self.db
        h, g = None, -1
        for i in range(self.t):
            if i > 0:
                h = b.side_collective(
                    f"{tag}.ub_rs{i - 1}.fwd",
                    K.RING_EXCHANGE,
                    "tp",
                    chunk,
                    UB_P2P_STREAM,
                    (g,),
                    sms=CE_SMS,
                )
            g = self.prec.gemm(
                f"{tag}.fwd{i}", lay.name, rows, lay.n_local, lay.k_local, self.cfg.ring_rs_margin
            )
        if h is not None:
            b.wait(h)
        elems = rows * lay.n
        b.compute(f"{tag}.ub_rs.reduce", C.ELEMENTWISE, self.t * elems,
                  (self.t + 1) * elems * self.db)  # fmt: skip

    # ------------------------------------------------------------ passes
    def forward(self, lay: TpLinear, tag: str) -> None:
        """The forward GEMM with its all-gather (column) or reduce-scatter (row)."""
        if lay.column:
            gb = self.prec.gather_bytes(lay.name)
            ex = (self.M // self.t) * lay.k * gb
            self._ring_gemm(f"{tag}.fwd", lay, lay.n_local, lay.k_local, ex)
        elif self.cfg.rs_method == "ring_exchange":
            self._ring_rs_gemm(tag, lay)
        else:
            self._pipeline_gemm(tag, lay)

    def row_backward(self, lay: TpLinear, tag: str) -> None:
        """Row-parallel: the dgrad ring-exchanges the output gradient (quantised first
        under FP8), the wgrad reads the gathered copy (external)."""
        gb = self.prec.gather_bytes(lay.name)
        self.prec.grad_cast(lay.name, tag, (self.M // self.t) * lay.n, gathered=True)
        ex = (self.M // self.t) * lay.n * gb
        self._ring_gemm(f"{tag}.dI", lay, lay.k_local, lay.n_local, ex)
        self.prec.gathered_transpose(lay.name, f"{tag}.grad", self.M * lay.n)
        self.prec.gemm(f"{tag}.dW", lay.name, lay.k_local, lay.n_local, self.M)

    def column_backward(self, lay: TpLinear, tag: str) -> None:
        """Column-parallel: bulk all-gather of the input beside the dgrad, bulk
        reduce-scatter of dI beside the wgrad; both GEMMs leave the comm SMs."""
        b, M, margin = self.b, self.M, self.cfg.margin
        self.prec.grad_cast(lay.name, tag, M * lay.n_local, gathered=False)
        gb = self.prec.gather_bytes(lay.name)
        ag = b.side_collective(
            f"{tag}.ub_ag.input", K.ALL_GATHER, "tp", M * lay.k * gb, UB_COMM_STREAM,
            b.last_compute(), sms=self.cfg.comm_sms,
        )  # fmt: skip
        g = self.prec.gemm(f"{tag}.dI", lay.name, M, lay.k_local, lay.n_local, margin)
        b.wait(ag)
        self.prec.gathered_transpose(lay.name, f"{tag}.input", M * lay.k)
        rs = b.side_collective(
            f"{tag}.ub_rs.bwd", K.REDUCE_SCATTER, "tp", M * lay.k * self.db, UB_COMM_STREAM,
            (g,), sms=self.cfg.comm_sms,
        )  # fmt: skip
        self.prec.gemm(f"{tag}.dW", lay.name, lay.k_local, lay.n_local, M, margin)
        b.wait(rs)
