"""ZeRO-3 / FSDP / ZeRO++ weight gathers and gradient reductions of one rank.

Gathers follow DeepSpeed's ZeRO-3 code (deepspeed/runtime/zero/partition_parameters.py,
partitioned_param_coordinator.py, commit 38327e0): the first forward all-gather of an
iteration reads the forward partition (ZeRO's primary shards over all GPUs); releasing the
gathered weight fills the secondary partition (hpZ, `_partition_param_sec`), and every
later all-gather of the iteration (recompute, backward, the forwards of later
microbatches) reads that secondary partition when there is one (`use_secondary_tensor`),
so those never leave the node (ZeRO++) or the GCD pair (the Frontier hierarchy). With qwZ
every all-gather, primary or secondary, moves int8 (`all_gather_coalesced(quantize=True)`
quantises the secondary shards too): quantise the shard, gather 1 byte per element,
dequantise the gathered weight.

Gradient reductions: a reduce-scatter over the shard group, or a hierarchy of them
(finest level first, each on the previous level's output); with qgZ each level is an
int4 all-to-all between a quantise and a dequantise-and-reduce kernel, the whole chain on
a reduction side stream (DeepSpeed's qgZ), so the backward keeps computing. HSDP adds an
all-reduce of the shard over the replicas once the gradients are final.

Quantisation kernels are memory-bound QUANTIZE ops with the bytes DeepSpeed's kernels
move (csrc/quantization, commit 38327e0): `quantize` reads the fp16 shard and writes int8
(qwZ); `dequantize` reads int8/int4 and writes fp16; `swizzle_quant` reads the fp16
gradient and writes int4 in the order of the all-to-all; `quantized_reduction` reads the
int4 pieces of all k peers of a level and writes their dequantised sum requantised to int4,
1/k of its input (pt_binding.cpp: output = input / devices_per_node). Their fp32 scale
factors travel in a collective of their own right after the data, as DeepSpeed issues
them: qwZ all-gathers one scale per group of about QWZ_GROUP_ELEMS weights
(`quant_handle`), qgZ's all-to-alls one scale per row or column group
(`all_to_all_single(scale_output, ...)`). Their bytes are small; what they add is one
more collective's latency.

Coalesced gathers (DeepSpeed's `all_gather_coalesced` of more than one parameter) also
copy: the shards are concatenated into one buffer before the collective (or before the
quantise kernel), and after it every parameter is cut out of the gathered buffer with a
`torch.cat` of its world-size pieces (AllGatherCoalescedHandle.wait), a copy of the whole
gathered output; a single parameter is gathered in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workloads.builder import comm_stream
from workloads.hybrid.groups import LEVEL_GROUP, REFRESH_GROUP, gradient_groups, group_size
from workloads.hybrid.setup import HybridSetup
from workloads.hybrid.streams import StreamBuilder
from workloads.ops import CollectiveKind as K
from workloads.ops import ComputeKind as C

INT8_BYTES = 1.0
INT4_BYTES = 0.5
SCALE_BYTES = 4.0  # fp32 quantisation scales
QWZ_GROUP_ELEMS = 8000
"""Weights per qwZ scale: DeepSpeed's CUDAQuantizer.target_group_size (partition_parameters.py,
commit 38327e0: "the optimal size is 4k, so we set the target to be below 8k")."""
QGZ_STREAM = "qgz"


@dataclass(frozen=True)
class Gather:
    """An all-gather in flight: its handle, output elements, whether it is int8 and
    whether it gathered several parameters at once (then cut apart by a copy)."""

    handle: int
    elems: float
    quantized: bool
    tag: str
    scales: int = -1  # the all-gather of the int8 scales (qwZ), if any
    coalesced: bool = False


class Sharder:
    """Emits the sharded data axis' collectives for one rank's program."""

    def __init__(self, b: StreamBuilder, setup: HybridSetup, dtype_bytes: int):
        self.b = b
        self.setup = setup
        self.sh = setup.sharding
        self.db = dtype_bytes
        self.pending: list[int] = []
        # True once the first forward of the iteration has gathered (and so filled the
        # secondary partition, DeepSpeed's `_partition_param_sec`)
        self.secondary_filled = False

    def level(self, backward: bool) -> str:
        """The partition an all-gather reads: the backward (secondary) partition for
        backward/recompute gathers and for forwards once it is filled, else the forward one."""
        sh = self.sh
        if backward:
            return sh.backward_level
        if self.secondary_filled and sh.backward_level != "global":
            return sh.backward_level
        return sh.forward_level

    def _size(self, group: str) -> int:
        return group_size(self.setup, group)

    def gather(
        self,
        tag: str,
        elems: float,
        backward: bool,
        blocking: bool,
        stream: str | None = None,
        coalesced: bool = False,
        level: str | None = None,
    ) -> Gather:
        """All-gather `elems` weight elements (the gathered size) for forward or backward.

        `stream`: issue it from that side stream (DeepSpeed's allgather stream) instead of
        after the compute issued so far: the quantise kernel runs there and the
        collective waits for nothing on the compute stream. `coalesced`: several
        parameters in one call (their shards concatenated first, DeepSpeed's
        `all_gather_coalesced`). `level`: the partition it reads, when the caller knows it
        (DeepSpeed's per-parameter `ds_secondary_tensor`), else `level(backward)`."""
        group = LEVEL_GROUP[level or self.level(backward)]
        size = self._size(group)
        if size == 1:
            return Gather(-1, elems, False, tag)
        quant = self.sh.qwz
        deps: tuple[int, ...] = ()
        shard = elems / size
        if coalesced:  # torch.cat of the shards into the flat send buffer
            deps = (self._kernel(f"{tag}.cat_shards", C.MEMCPY, 0.0, 2 * self.db * shard, stream),)
        if quant:
            flops, nbytes = 2.0 * shard, (self.db + INT8_BYTES) * shard
            deps = (self._kernel(f"{tag}.qwz.quant", C.QUANTIZE, flops, nbytes, stream, deps),)
        nbytes = elems * (INT8_BYTES if quant else self.db)
        h = self._collective(f"{tag}.ag_{group}", group, nbytes, stream, deps)
        scales = -1
        if quant:
            scale_bytes = SCALE_BYTES * math.ceil(elems / QWZ_GROUP_ELEMS)
            scales = self._collective(f"{tag}.ag_{group}.scales", group, scale_bytes, stream, ())
        g = Gather(h, elems, quant, tag, scales, coalesced)
        if blocking:
            self.finish(g)
        return g

    def _kernel(
        self,
        name: str,
        kind: C,
        flops: float,
        nbytes: float,
        stream: str | None,
        deps: tuple[int, ...] = (),
    ) -> int:
        """A kernel on the compute stream (stream None) or on a side stream."""
        if stream is None:
            return self.b.compute(name, kind, flops, nbytes)
        return self.b.side_compute(name, kind, flops, nbytes, stream, deps)

    def _collective(
        self, name: str, group: str, nbytes: float, stream: str | None, deps: tuple[int, ...]
    ) -> int:
        if stream is None:
            return self.b.collective(name, K.ALL_GATHER, group, nbytes, blocking=False)
        return self.b.side_collective(name, K.ALL_GATHER, group, nbytes, comm_stream(group), deps)

    def finish(self, g: Gather, stream: str | None = None) -> None:
        """Wait for a gather (and dequantise an int8 one, and cut a coalesced one apart).

        `stream`: do that work on the side stream (DeepSpeed waits for its handles inside
        `with stream(allgather_stream)`, so the dequantise kernel and the copies run
        there), then make the compute stream wait for it (`wait_stream`)."""
        if g.handle < 0:
            return
        if stream is None:
            self.b.wait(g.handle)
            if g.scales >= 0:
                self.b.wait(g.scales)
            deps: tuple[int, ...] = ()
        else:
            deps = (g.handle, *((g.scales,) if g.scales >= 0 else ()))
        last = None
        if g.quantized:
            flops, nbytes = 2.0 * g.elems, (INT8_BYTES + self.db) * g.elems
            last = self._kernel(f"{g.tag}.qwz.dequant", C.QUANTIZE, flops, nbytes, stream, deps)
            deps = (last,)
        if g.coalesced:  # each parameter: torch.cat of its world-size pieces
            last = self._kernel(
                f"{g.tag}.cat_params", C.MEMCPY, 0.0, 2 * self.db * g.elems, stream, deps
            )
        if stream is not None:
            for target in (last,) if last is not None else deps:
                self.b.wait(target)

    def reduce(self, tag: str, elems: float, last: bool, max_dim: int = 0) -> None:
        """Reduce `elems` gradient elements into shards (every microbatch unless
        `sync_every_microbatch` is off), and over the replicas when `last`. `max_dim`: the
        weight's larger dimension where known (it sets qgZ's scale count)."""
        if not (last or self.sh.sync_every_microbatch):
            return
        levels = [g for g in gradient_groups(self.sh.gradient_level) if self._size(g) > 1]
        if self.sh.qgz:
            tail, cur = self._qgz_chain(tag, elems, levels, max_dim)
        else:
            tail, cur = self._rs_chain(tag, elems, levels)
        if last and self.setup.replicate > 1:
            tail = self.b.collective(
                f"{tag}.ar_replicate",
                K.ALL_REDUCE,
                "replicate",
                cur * self.db,
                blocking=False,
                deps=() if tail is None else (tail,),
            )
        if tail is not None:
            self.pending.append(tail)

    def _rs_chain(self, tag: str, elems: float, levels: list[str]) -> tuple[int | None, float]:
        prev: int | None = None
        cur = elems
        for g in levels:
            prev = self.b.collective(
                f"{tag}.rs_{g}",
                K.REDUCE_SCATTER,
                g,
                cur * self.db,
                blocking=False,
                deps=() if prev is None else (prev,),
            )
            cur /= self._size(g)
        return prev, cur

    def _qgz_chain(
        self, tag: str, elems: float, levels: list[str], max_dim: int
    ) -> tuple[int | None, float]:
        tail = self.qgz_reduce(tag, elems, max_dim, QGZ_STREAM, self.b.last_compute(), levels)
        final = elems
        for g in levels:
            final /= self._size(g)
        return tail, final

    def qgz_reduce(
        self,
        tag: str,
        elems: float,
        max_dim: int,
        stream: str,
        deps: tuple[int, ...],
        levels: list[str] | None = None,
    ) -> int:
        """DeepSpeed's `all_to_all_quant_reduce` of one 2-D gradient (runtime/comm/
        coalesced_collectives.py, commit 38327e0) over the levels of the gradient
        hierarchy (ZeRO++: node, then across nodes; the Frontier hierarchy: pair, node,
        across nodes): `swizzle_quant` to int4, then per level an all-to-all of the data
        and one of its scales; between levels `quantized_reduction` (the k pieces summed,
        requantised, 1/k the size); after the last, `dequantize` and the Python
        `sum(chunks) / num_nodes` (one add per chunk, then a divide: small kernels).
        Kernels run on `stream`, each collective on its communicator's stream after the
        kernel before it (all_to_all_single is synchronous: the next kernel waits).
        Returns the last op."""
        b = self.b
        if levels is None:
            levels = [g for g in gradient_groups(self.sh.gradient_level) if self._size(g) > 1]
        # intra_quant_group = max(rows, columns, world); inter = intra // local world size
        groups = max(max_dim, self.setup.world)
        cur = elems
        tail = b.side_compute(
            f"{tag}.qgz.swizzle_quant",
            C.QUANTIZE,
            4.0 * cur,
            (self.db + INT4_BYTES) * cur + SCALE_BYTES * groups,
            stream,
            deps,
        )
        for i, g in enumerate(levels):
            k = self._size(g)
            data = b.side_collective(
                f"{tag}.qgz.a2a_{g}", K.ALL_TO_ALL, g, INT4_BYTES * cur, comm_stream(g), (tail,)
            )
            scales = b.side_collective(
                f"{tag}.qgz.a2a_{g}.scales",
                K.ALL_TO_ALL,
                g,
                SCALE_BYTES * groups,
                comm_stream(g),
                (tail,),
            )
            if i < len(levels) - 1:
                out_groups = max(groups // k, 1)
                tail = b.side_compute(
                    f"{tag}.qgz.quantized_reduction_{g}",
                    C.QUANTIZE,
                    3.0 * cur,
                    INT4_BYTES * cur * (1 + 1 / k) + SCALE_BYTES * (groups + out_groups),
                    stream,
                    (data, scales),
                )
                cur /= k
                groups = out_groups
                continue
            tail = b.side_compute(
                f"{tag}.qgz.dequant",
                C.QUANTIZE,
                2.0 * cur,
                (INT4_BYTES + self.db) * cur,
                stream,
                (data, scales),
            )
            piece = cur / k
            # sum(list(final_output.chunk(k))): 0 + c0, + c1, ..., + c(k-1); then / k
            for j in range(k):
                reads = 1 if j == 0 else 2
                tail = b.side_compute(
                    f"{tag}.qgz.sum{j}", C.ELEMENTWISE, piece, (reads + 1) * self.db * piece, stream
                )
            tail = b.side_compute(
                f"{tag}.qgz.average", C.ELEMENTWISE, piece, 2 * self.db * piece, stream
            )
        return tail

    def wait_pending(self, name: str = "wait:grads") -> None:
        """The compute stream waits for every outstanding gradient reduction."""
        self.b.wait_all(self.pending, name)

    def refresh_forward_partition(self, params: float) -> None:
        """After the step: rebuild a node/pair forward partition from the global shards."""
        level = self.sh.forward_level
        if level == "global":
            return
        group = REFRESH_GROUP[level]
        if self._size(group) > 1:
            out = params / self._size(LEVEL_GROUP[level])
            self.b.collective(f"refresh.ag_{group}", K.ALL_GATHER, group, out * self.db)
