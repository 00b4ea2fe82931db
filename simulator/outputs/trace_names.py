"""How simulated records are named in the traces users' tools read (Kineto, Perfetto,
Chakra): NCCL kernel names, PyTorch collective and ATen op names, process groups.

Why one module: the Perfetto trace, the per-rank Kineto traces and the Chakra execution
trace must name the same collective, group instance and message sizes the same way, and
tools match on these strings (Holistic Trace Analysis classifies kernels whose name starts
with `nccl` as communication; Chakra's converter reads the collective type from the
name).

- Kernel names follow NCCL >= 2.19 (src/device/generate.py, `best_kernel`): every
  all-gather and broadcast runs `ncclDevKernel_<Coll>_RING_LL`, every all-reduce, reduce
  and reduce-scatter `ncclDevKernel_<Coll>_Sum_<type>_<RING|TREE>_LL` (the LL kernel is
  the one specialised per function; other protocols run inside it), point-to-point and
  all-to-all (grouped send/recv in NCCL) `ncclDevKernel_SendRecv`. The engine's tuner
  does not record its ring/tree choice per collective, so auto-tuned all-reduces are
  named RING unless the program or config fixes the tree.
- Message sizes follow `record_param_comms`: all-gather In = shard, Out = shard x group;
  reduce-scatter In = full, Out = full / group; the others In = Out.
- Process groups are numbered as PyTorch names them (`pg_name` "0" is the default group
  of all ranks), then every instance of every group kind of the workload in order; the
  description is the strategy's own group name and instance (`tp#3`). The numbering is a
  pure function of the workload's groups, so every rank's file agrees.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from workloads.groups import ProcessGroups

NCCL_COLL = {
    "all-reduce": "AllReduce",
    "all-gather": "AllGather",
    "reduce-scatter": "ReduceScatter",
    "all-to-all": "SendRecv",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
    "send-recv": "SendRecv",
    "ring-exchange": "SendRecv",  # batch_isend_irecv: NCCL runs it as a SendRecv kernel
}
# c10d names as `record_param_comms` writes them ("Collective name") and the
# `nccl:<name>` user annotation around them
COLLECTIVE_NAMES = {
    "all-reduce": "allreduce",
    "all-gather": "_allgather_base",
    "reduce-scatter": "_reduce_scatter_base",
    "all-to-all": "all_to_all",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "send-recv": "send",
    "ring-exchange": "batch_isend_irecv",
}
ANNOTATION_NAMES = {
    "all-reduce": "nccl:all_reduce",
    "all-gather": "nccl:_all_gather_base",
    "reduce-scatter": "nccl:_reduce_scatter_base",
    "all-to-all": "nccl:all_to_all",
    "broadcast": "nccl:broadcast",
    "reduce": "nccl:reduce",
    "send-recv": "nccl:send",
    "ring-exchange": "nccl:batch_isend_irecv",
}
NCCL_TYPES = {1: "u8", 2: "bf16", 4: "f32", 8: "f64"}
KINETO_DTYPES = {1: "Byte", 2: "BFloat16", 4: "Float", 8: "Double"}
_REDUCING = frozenset({"all-reduce", "reduce", "reduce-scatter"})

# The ATen op a compute kind is dispatched as (the CPU-side parent of its kernel);
# elementwise ops are named by what the workload calls them.
ATEN_BY_KIND = {
    "gemm": "aten::mm",
    "attention": "aten::_flash_attention_forward",
    "optimizer": "aten::_fused_adamw_",
    "memcpy": "aten::copy_",
    "quantize": "aten::_to_copy",
    "elementwise": "aten::add",
}
ATEN_ELEMENTWISE = (
    ("ln", "aten::native_layer_norm"),
    ("norm", "aten::native_layer_norm"),
    ("gelu", "aten::gelu"),
    ("swiglu", "aten::silu"),
    ("act", "aten::gelu"),
    ("softmax", "aten::_softmax"),
    ("dropout", "aten::native_dropout"),
    ("embedding", "aten::embedding"),
    ("loss", "aten::cross_entropy_loss"),
)


def kernel_name(kind: str, name: str, dtype_bytes: int = 2, algorithm: str | None = None) -> str:
    """The GPU kernel name of a record: NCCL's for communication, the op name otherwise."""
    coll = NCCL_COLL.get(kind)
    if coll is None:
        return name
    if coll == "SendRecv":
        return "ncclDevKernel_SendRecv"
    if kind not in _REDUCING:
        return f"ncclDevKernel_{coll}_RING_LL"
    algo = "TREE" if algorithm == "tree" else "RING"
    return f"ncclDevKernel_{coll}_Sum_{NCCL_TYPES.get(dtype_bytes, 'bf16')}_{algo}_LL"


def aten_name(kind: str, name: str, phase: str) -> str:
    """The ATen op on the CPU that launches a compute kernel."""
    if kind == "attention":
        bwd = phase == "bwd"
        return "aten::_flash_attention_backward" if bwd else "aten::_flash_attention_forward"
    if kind == "elementwise":
        low = name.lower()
        for key, aten in ATEN_ELEMENTWISE:
            if key in low:
                return aten
    return ATEN_BY_KIND.get(kind, "aten::empty")


def message_nelems(kind: str, nbytes: float, group_size: int, dtype_bytes: int) -> tuple[int, int]:
    """(In msg nelems, Out msg nelems) of a collective whose full buffer is `nbytes`."""
    full = int(nbytes // max(dtype_bytes, 1))
    if kind == "all-gather":
        return full // max(group_size, 1), full
    if kind == "reduce-scatter":
        return full, full // max(group_size, 1)
    return full, full


def format_ranks(ranks: np.ndarray | list[int]) -> str:
    """Ranks as PyTorch writes `Process Group Ranks`: "[0, 1, 2]"."""
    return "[" + ", ".join(str(int(r)) for r in ranks) + "]"


def compact_ranks(ranks: np.ndarray | list[int]) -> str:
    """Sorted ranks as ranges ("0-7,16-23"), short enough for 32,768 ranks."""
    arr = np.unique(np.asarray(ranks, dtype=np.int64))
    if arr.size == 0:
        return ""
    breaks = np.flatnonzero(np.diff(arr) != 1)
    starts = np.concatenate(([arr[0]], arr[breaks + 1]))
    ends = np.concatenate((arr[breaks], [arr[-1]]))
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in zip(starts, ends, strict=True))


@dataclass(frozen=True)
class GroupRegistry:
    """Process-group numbering of a workload (see module doc)."""

    groups: ProcessGroups
    offsets: dict[str, int]
    _ranks_text: dict[tuple[str, int], str] = field(default_factory=dict, repr=False)

    def ranks_text(self, kind: str, rank: int) -> str:
        """`Process Group Ranks` of `rank`'s instance of `kind` (formatted once: a group of
        1,024 ranks is 6 kB of text, written on every collective)."""
        key = (kind, self.instance(kind, rank))
        text = self._ranks_text.get(key)
        if text is None:
            text = self._ranks_text[key] = format_ranks(self.members(kind, rank))
        return text

    @classmethod
    def build(cls, groups: ProcessGroups) -> GroupRegistry:
        offsets: dict[str, int] = {}
        next_id = 1  # "0" is PyTorch's default group of all ranks
        for name in groups:
            kind = groups[name]
            if kind.num_instances == 1 and kind.size == groups.world_size:
                offsets[name] = 0
                continue
            offsets[name] = next_id
            next_id += kind.num_instances
        return cls(groups, offsets)

    def instance(self, kind: str, rank: int) -> int:
        """The instance of group kind `kind` that `rank` belongs to (-1: none)."""
        if kind not in self.groups:
            return -1
        return int(self.groups[kind].instance_of[rank])

    def pg_name(self, kind: str, rank: int) -> str:
        inst = self.instance(kind, rank)
        return "0" if inst < 0 else str(self.offsets[kind] + inst)

    def pg_desc(self, kind: str, rank: int) -> str:
        inst = self.instance(kind, rank)
        if inst < 0 or self.offsets.get(kind) == 0:
            return "default_pg" if inst < 0 else kind
        return f"{kind}#{inst}"

    def members(self, kind: str, rank: int) -> np.ndarray:
        inst = self.instance(kind, rank)
        if inst < 0:
            return np.arange(self.groups.world_size)
        return self.groups[kind].members[inst]

    def pg_config(self, rank: int) -> list[dict[str, object]]:
        """`distributedInfo.pg_config` of one rank: the default group and its instances."""
        out: list[dict[str, object]] = [
            {"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
             "pg_size": self.groups.world_size, "ranks": "all"}
        ]  # fmt: skip
        for kind in self.groups:
            if self.offsets[kind] == 0 or self.instance(kind, rank) < 0:
                continue
            members = self.members(kind, rank)
            out.append(
                {"pg_name": self.pg_name(kind, rank), "pg_desc": self.pg_desc(kind, rank),
                 "backend_config": "cuda:nccl", "pg_size": int(members.size),
                 "ranks": format_ranks(members)}
            )  # fmt: skip
        return out

    def all_groups(self) -> dict[str, list[int]]:
        """Every process group: pg_name -> member ranks (the communicator-group file)."""
        out: dict[str, list[int]] = {"0": list(range(self.groups.world_size))}
        for kind in self.groups:
            base = self.offsets[kind]
            if base == 0:
                continue
            for inst, row in enumerate(self.groups[kind].members):
                out[str(base + inst)] = [int(r) for r in row]
        return out
