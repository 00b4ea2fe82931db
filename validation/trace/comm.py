"""Collective metadata: kind, full-buffer bytes S, group size and process group.

Sources, best first (each field independently):
- kind: kernel args `Collective name` > record_param_comms `Collective name` > the c10d
  op (`c10d::_reduce_scatter_base_` also names gloo reduce-scatters that run as
  `gloo:all_reduce`) > the `nccl:`/`gloo:` annotation > the NCCL kernel name.
- bytes S (the derived-CSV convention: the input for all-reduce, all-to-all,
  reduce-scatter and broadcast; the output = shard x group for all-gather): `In msg
  nelems`/`Out msg nelems` x dtype size > the annotation's `Input Dims`/`Input type` >
  the c10d op's `Input Dims`.
- group size: kernel args > record_param_comms `Group size` > the c10d full/shard dims
  ratio (all-gather, reduce-scatter) > the process group's size in pg_config > world_size.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from validation.errors import TraceError
from validation.trace.classify import collective_from_kernel_name, collective_kind
from validation.trace.events import CpuRange
from validation.trace.shapes import dtype_size, first_dtype, numel, tensor_dims

_INTS = re.compile(r"-?\d+")


@dataclass(frozen=True, slots=True)
class ProcessGroup:
    """One entry of distributedInfo.pg_config."""

    name: str
    desc: str
    size: int
    ranks: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class CollectiveInfo:
    """Side-table row for one collective record (`index` = its row in the RankTimeline)."""

    index: int
    kind: str
    collective: str
    kind_source: str
    dtype: str
    in_nelems: int
    out_nelems: int
    bytes: int
    bytes_source: str
    group_size: int
    group_size_source: str
    pg_name: str
    pg_desc: str
    pg_ranks: tuple[int, ...]
    iteration: int


def parse_ranks(value: Any) -> tuple[int, ...]:
    """Ranks from a list or a string such as "[0, 1]"."""
    if isinstance(value, list):
        return tuple(int(v) for v in value if isinstance(v, int))
    if isinstance(value, str):
        return tuple(int(v) for v in _INTS.findall(value))
    return ()


def parse_pg_config(dist: dict[str, Any]) -> tuple[ProcessGroup, ...]:
    """Process groups of distributedInfo.pg_config (`uid` stands for `pg_desc` in 2024-04)."""
    out = []
    for pg in dist.get("pg_config") or ():
        if isinstance(pg, dict):
            ranks = parse_ranks(pg.get("ranks"))
            size = int(pg.get("pg_size") or len(ranks))
            desc = str(pg.get("pg_desc", pg.get("uid", "")))
            out.append(ProcessGroup(str(pg.get("pg_name", "")), desc, size, ranks))
    return tuple(out)


@dataclass
class _Partial:
    kind: str = ""
    collective: str = ""
    kind_source: str = "unknown"
    dtype: str = ""
    in_nelems: int = 0
    out_nelems: int = 0
    bytes: int = 0
    bytes_source: str = "none"
    group_size: int = 0
    group_size_source: str = ""
    pg_name: str = ""
    pg_desc: str = ""
    pg_ranks: tuple[int, ...] = ()


def c10d_sizes(name: str, dims: Any) -> tuple[int, int]:
    """(elements of the full buffer S, group size or 0) from a c10d op's Input Dims."""
    kind = collective_kind(name)
    tensors = tensor_dims(dims)
    if not tensors:
        return 0, 0
    first = numel(tensors[0])
    second = numel(tensors[1]) if len(tensors) > 1 else 0
    if kind == "all-gather" and second:
        return first, first // second if first % second == 0 else 0
    if kind == "reduce-scatter" and second:
        return second, second // first if first and second % first == 0 else 0
    if kind == "all-to-all" and second:
        return second, 0
    return first, 0


def _element_count(meta: dict[str, Any], key: str, kernel_name: str) -> int:
    """A message's element count (absent: 0). Why an error, not a guess: a count that is
    not a whole number (found by the bad-input suite: 'perlmutter') would size the
    collective from nothing."""
    value = meta.get(key) or 0
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TraceError(
            f"collective {kernel_name!r}: {key!r} is {value!r}, not a whole number of elements"
        )
    return value


def _from_metadata(p: _Partial, meta: dict[str, Any], source: str, kernel_name: str) -> None:
    if not p.kind:
        kind = collective_kind(str(meta.get("Collective name", "")))
        if kind:
            p.kind, p.collective, p.kind_source = kind, str(meta["Collective name"]), source
    if p.bytes_source == "none" and "In msg nelems" in meta:
        p.dtype = str(meta.get("dtype", ""))
        p.in_nelems = _element_count(meta, "In msg nelems", kernel_name)
        p.out_nelems = _element_count(meta, "Out msg nelems", kernel_name)
        p.bytes_source = source
    if not p.group_size and isinstance(meta.get("Group size"), int) and meta["Group size"] > 0:
        p.group_size, p.group_size_source = int(meta["Group size"]), source
    if not p.pg_name and "Process Group Name" in meta:
        p.pg_name = str(meta["Process Group Name"])
        p.pg_desc = str(meta.get("Process Group Description", ""))
        p.pg_ranks = parse_ranks(meta.get("Process Group Ranks"))


def _from_ops(p: _Partial, ops: Sequence[CpuRange]) -> int:
    """Fill kind/sizes from c10d ops and annotations; returns the annotation's element count."""
    c10d = next((o for o in ops if o.name.startswith("c10d::")), None)
    note = next((o for o in ops if o.name.startswith(("nccl:", "rccl:", "gloo:"))), None)
    for op, source in ((c10d, "c10d"), (note, "annotation")):
        if op is not None and not p.kind and (kind := collective_kind(op.name)):
            p.kind, p.collective, p.kind_source = kind, op.name, source
    if c10d is not None and c10d.args and not p.group_size:
        group = c10d_sizes(c10d.name, c10d.args.get("Input Dims"))[1]
        if group:
            p.group_size, p.group_size_source = group, "inferred_from_c10d_dims"
    if p.bytes_source == "none" and note is not None and note.args:
        n = numel(tensor_dims(note.args.get("Input Dims")))
        if n:
            p.dtype, p.in_nelems, p.bytes_source = (
                first_dtype(note.args.get("Input type")),
                n,
                "annotation",
            )
    if p.bytes_source == "none" and c10d is not None and c10d.args:
        full = c10d_sizes(c10d.name, c10d.args.get("Input Dims"))[0]
        if full:
            p.dtype, p.in_nelems, p.bytes_source = (
                first_dtype(c10d.args.get("Input type")),
                full,
                "c10d",
            )
            p.out_nelems = full
    return p.in_nelems


def _finish(p: _Partial, world_size: int, pgs: Sequence[ProcessGroup]) -> None:
    pg = next((g for g in pgs if g.name == p.pg_name), None) if p.pg_name else None
    if pg is not None:
        p.pg_desc = p.pg_desc or pg.desc
        p.pg_ranks = p.pg_ranks or pg.ranks
    if not p.group_size:
        if pg is not None:
            p.group_size, p.group_size_source = pg.size, "pg_config"
        else:
            p.group_size, p.group_size_source = max(world_size, 1), "assumed_world_size"
    size = dtype_size(p.dtype)
    if p.bytes_source in ("annotation", "c10d"):
        n = p.in_nelems
        if p.kind == "all-gather":
            # The annotation carries the shard; the c10d op gives the full output.
            p.out_nelems = n * p.group_size if p.bytes_source == "annotation" else n
            p.in_nelems = n if p.bytes_source == "annotation" else n // max(p.group_size, 1)
        elif p.kind == "reduce-scatter":
            p.out_nelems = n // max(p.group_size, 1)
        else:
            p.out_nelems = n
    if p.kind == "all-gather":
        p.bytes = p.out_nelems * size
    elif p.kind == "send-recv":
        p.bytes = max(p.in_nelems, p.out_nelems) * size
    else:
        p.bytes = p.in_nelems * size


def resolve_collective(
    index: int,
    kernel_name: str,
    kernel_args: dict[str, Any],
    ops: Sequence[CpuRange],
    world_size: int,
    pgs: Sequence[ProcessGroup],
    iteration: int,
    pg_hint: str = "",
) -> CollectiveInfo:
    """Collective metadata of one NCCL/RCCL kernel or gloo annotation (see module doc).

    `ops` are the enclosing CPU ranges that describe the collective (record_param_comms,
    c10d op, annotation), innermost first; `pg_hint` names the process group when the
    caller knows it otherwise (gloo worker threads).
    """
    p = _Partial(pg_name=pg_hint)
    if "Collective name" in kernel_args:
        _from_metadata(p, kernel_args, "kernel_args", kernel_name)
    for op in ops:
        if op.name == "record_param_comms" and op.args and "Collective name" in op.args:
            _from_metadata(p, op.args, "record_param_comms", kernel_name)
    _from_ops(p, ops)
    if not p.kind:
        found = collective_from_kernel_name(kernel_name)
        if found:
            p.kind, p.collective, p.kind_source = found[0], found[1], "kernel_name"
        else:
            p.kind, p.collective = "send-recv", ""
    _finish(p, world_size, pgs)
    return CollectiveInfo(
        index=index, kind=p.kind, collective=p.collective, kind_source=p.kind_source,
        dtype=p.dtype, in_nelems=p.in_nelems, out_nelems=p.out_nelems, bytes=p.bytes,
        bytes_source=p.bytes_source, group_size=p.group_size,
        group_size_source=p.group_size_source, pg_name=p.pg_name, pg_desc=p.pg_desc,
        pg_ranks=p.pg_ranks, iteration=iteration,
    )  # fmt: skip
