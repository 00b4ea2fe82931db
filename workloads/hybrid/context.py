"""Attention under context parallelism, as Megatron-Core runs it through Transformer Engine.

With context parallelism (cp GPUs per sequence) every GPU holds s/cp tokens of each
sequence: two chunks of the sequence cut into 2·cp, chunks i and 2cp-1-i, so that causal
attention costs every GPU the same (Transformer Engine, `attention/dot_product_attention/
context_parallel.py`; Megatron-LM docs/user-guide/features/context_parallel.md). Linear
layers, norms and the MLP need nothing else; attention needs every earlier token's keys
and values, which TE gets one of three ways (`cp_comm_type`):

- p2p (Megatron's default): cp steps around the ring. At step i a GPU computes its
  queries against the KV block it holds while it already passes that block on to the
  next GPU (`batch_isend_irecv`, its own stream), so the exchange hides behind the
  attention when a step's compute outlasts the step's transfer. Forward: cp - 1
  exchanges of the local K and V; each step is 1/cp of the GPU's causal attention work
  (the diagonal step two causal half-blocks and one full, the others one full half of
  a block pair). Backward: the ring again, carrying K and V (steps 0..cp-2) and the
  accumulated dK and dV (steps 1..cp-1); each exchange waits for the step before it
  (the dKV it sends was just computed). TE merges the per-step outputs with the
  log-sum-exp (`flash_attn_fwd_out_correction`) and accumulates dQ and dKV per step.
- all_gather: an all-gather of K and V before the attention (not overlapped), again in
  backward, and a reduce-scatter of dK and dV.
- a2a (DeepSpeed-Ulysses): all-to-all from the sequence split to a head split before
  the attention (Q, K and V) and back after it (the output); the mirror in backward.
"""

from __future__ import annotations

from workloads.builder import comm_stream
from workloads.errors import WorkloadError
from workloads.hybrid.setup import HybridSetup
from workloads.hybrid.streams import StreamBuilder
from workloads.models import TransformerSpec
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C
from workloads.transformer import ATTENTION_BACKWARD_FACTOR, BlockShape

CP_STREAM = comm_stream("cp")  # the CP communicator's stream (TE posts the ring on it)
MERGE_PASSES = 3  # per step: read the step's output, read and write the running output


class ContextParallelAttention:
    """Emits one block's attention, forward and backward, on a CP group of `setup.cp`."""

    def __init__(self, builder: StreamBuilder, shape: BlockShape, setup: HybridSetup, db: int):
        self.b = builder
        self.shape = shape
        self.cp = setup.cp
        self.mode = setup.cp_comm
        self.db = db
        kv_width = shape.qkv_width - shape.heads * shape.head_dim  # local K and V features
        self.kv_bytes = float(db * shape.attn_tokens * kv_width)  # this GPU's K and V
        self.qkv_bytes = float(db * shape.attn_tokens * shape.qkv_width)
        self.out_bytes = float(db * shape.attn_tokens * shape.heads * shape.head_dim)

    # --------------------------------------------------------------- kernels
    def _attention(self, name: str, fraction: float, backward: bool) -> None:
        """A flash-attention kernel doing `fraction` of this GPU's attention work."""
        sh = self.shape
        flops = fraction * sh.attention_forward_flops()
        # as the single-GPU kernel (BlockEmitter): q, k, v in and the output out forward;
        # q, k, v and their gradients backward
        nbytes = fraction * self.db * sh.attn_tokens * (sh.qkv_width + sh.heads * sh.head_dim)
        if backward:
            flops *= ATTENTION_BACKWARD_FACTOR
            nbytes = fraction * 2 * self.db * sh.attn_tokens * sh.qkv_width
        keys = max(sh.seq_len * fraction, 1.0)
        shape = (sh.attn_tokens, int(keys), sh.heads, sh.head_dim)
        self.b.compute(name, C.ATTENTION, flops, nbytes, shape)

    def _accumulate(self, name: str, elems: float) -> None:
        """Merging the per-step results (memory-bound, MERGE_PASSES per step)."""
        self.b.compute(
            name, C.ELEMENTWISE, 2.0 * elems * self.cp, MERGE_PASSES * self.cp * elems * self.db
        )

    # ------------------------------------------------------------ forward
    def forward(self, layer: int) -> None:
        """The attention of block `layer` (also its recompute under checkpointing)."""
        tag = f"L{layer}.attn"
        if self.mode == "all_gather":
            self.b.collective(f"{tag}.ag_cp.fwd", K.ALL_GATHER, "cp", self.cp * self.kv_bytes)
            self._attention(f"{tag}.fwd", 1.0, backward=False)
            return
        if self.mode == "a2a":
            self.b.collective(f"{tag}.a2a_cp.qkv", K.ALL_TO_ALL, "cp", self.qkv_bytes)
            self._attention(f"{tag}.fwd", 1.0, backward=False)
            self.b.collective(f"{tag}.a2a_cp.out", K.ALL_TO_ALL, "cp", self.out_bytes)
            return
        self._ring_forward(tag)

    def _ring_forward(self, tag: str) -> None:
        """p2p: exchange i+1 runs while step i computes; step i waits for exchange i."""
        b, cp = self.b, self.cp
        deps = b.last_compute()
        handles: list[int] = []
        for i in range(cp):
            if i > 0:
                b.wait(handles[i - 1])
            if i < cp - 1:
                prev = (handles[-1],) if handles else deps
                handles.append(
                    b.side_collective(
                        f"{tag}.kv_cp.fwd{i}", K.RING_EXCHANGE, "cp", self.kv_bytes, CP_STREAM, prev
                    )
                )
            self._attention(f"{tag}.fwd{i}", 1.0 / cp, backward=False)
        self._accumulate(f"{tag}.merge.fwd", self.out_bytes / self.db)

    # ----------------------------------------------------------- backward
    def backward(self, layer: int) -> None:
        """The backward of block `layer`'s attention."""
        tag = f"L{layer}.attn"
        if self.mode == "all_gather":
            self.b.collective(f"{tag}.ag_cp.bwd", K.ALL_GATHER, "cp", self.cp * self.kv_bytes)
            self._attention(f"{tag}.bwd", 1.0, backward=True)
            self.b.collective(f"{tag}.rs_cp.bwd", K.REDUCE_SCATTER, "cp", self.cp * self.kv_bytes)
            return
        if self.mode == "a2a":
            self.b.collective(f"{tag}.a2a_cp.dout", K.ALL_TO_ALL, "cp", self.out_bytes)
            self._attention(f"{tag}.bwd", 1.0, backward=True)
            self.b.collective(f"{tag}.a2a_cp.dqkv", K.ALL_TO_ALL, "cp", self.qkv_bytes)
            return
        self._ring_backward(tag)

    def _ring_backward(self, tag: str) -> None:
        """p2p backward: step i posts the exchange (KV for step i+1, the dKV summed so
        far) after waiting for exchange i-1, then computes; the last dKV returns home."""
        b, cp, kv = self.b, self.cp, self.kv_bytes
        handle = -1
        for i in range(cp):
            if i > 0:
                b.wait(handle)
            size = (kv if i < cp - 1 else 0.0) + (kv if i > 0 else 0.0)
            handle = b.collective(
                f"{tag}.kv_cp.bwd{i}", K.RING_EXCHANGE, "cp", size, blocking=False
            )
            self._attention(f"{tag}.bwd{i}", 1.0 / cp, backward=True)
        b.wait(handle)
        self._accumulate(f"{tag}.merge.bwd", (self.out_bytes + self.kv_bytes) / self.db)


def check_context_parallel(spec: TransformerSpec, setup: HybridSetup) -> None:
    """Raise WorkloadError unless the sequence and heads split over cp as Transformer
    Engine needs: 2 x cp load-balanced chunks of the sequence (p2p, all_gather: each GPU
    takes chunks i and 2cp-1-i so causal work is even), the local heads over cp (a2a)."""
    cp = setup.cp
    if cp == 1:
        return
    if not setup.flash_attention:
        raise WorkloadError(
            "parallel.cp needs fused attention (training.flash_attention: true), as "
            "Transformer Engine's context parallelism does"
        )
    if setup.cp_comm == "a2a":
        kv = spec.kv_heads or spec.heads
        for n, what in ((spec.heads, "attention heads"), (kv, "key/value heads")):
            if (n // setup.tp) % cp:
                raise WorkloadError(
                    f"parallel.cp={cp} does not divide the {n // setup.tp} {what} per "
                    f"tensor-parallel GPU (cp_comm a2a splits heads)"
                )
        if spec.seq_len % cp:
            raise WorkloadError(f"parallel.cp={cp} does not divide model.seq_len={spec.seq_len}")
        return
    if spec.seq_len % (2 * cp):
        raise WorkloadError(
            f"parallel.cp={cp}: model.seq_len={spec.seq_len} does not split into 2 x cp = "
            f"{2 * cp} load-balanced chunks"
        )
