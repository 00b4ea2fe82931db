"""gloo on CPU: pair worker-thread `gloo:*` annotations with the c10d ops that issued them.

With the gloo backend (PyTorch 2.x CPU), each collective shows up twice: a `c10d::*`
cpu_op on the issuing thread (enqueue only) and a `gloo:*` user_annotation on one of the
process group's worker threads (the real duration, waiting included). Reduce-scatter runs
as `gloo:all_reduce`, and there is no record_param_comms. The c10d op gives the true kind
and the group size (full/shard dims ratio); the worker thread identifies the process group.
"""

from __future__ import annotations

from typing import Any

from validation.trace.classify import collective_kind
from validation.trace.comm import ProcessGroup, c10d_sizes
from validation.trace.events import CpuRange
from validation.trace.shapes import numel, tensor_dims


def _dims(r: CpuRange) -> Any:
    return r.args.get("Input Dims") if r.args else None


def _compatible(c10d: CpuRange, gloo_kind: str | None, gloo_numel: int) -> bool:
    kind = collective_kind(c10d.name)
    if kind != gloo_kind and not (gloo_kind == "all-reduce" and kind == "reduce-scatter"):
        return False
    tensors = tensor_dims(_dims(c10d))
    if not tensors or not gloo_numel:
        return True  # old TensorList dims carry no sizes: match on kind and order alone
    if kind == "all-gather" and len(tensors) > 1:
        return numel(tensors[1]) == gloo_numel
    return c10d_sizes(c10d.name, _dims(c10d))[0] == gloo_numel


def match_c10d(cpu: list[CpuRange]) -> dict[int, int]:
    """Map each gloo annotation (index) to its c10d op (index): first compatible, in order."""
    gloo = sorted(
        (i for i, r in enumerate(cpu) if r.name.startswith("gloo:")), key=lambda i: cpu[i].ts
    )
    c10d = sorted(
        (i for i, r in enumerate(cpu) if r.name.startswith("c10d::")), key=lambda i: cpu[i].ts
    )
    used: set[int] = set()
    out: dict[int, int] = {}
    first = 0
    for g in gloo:
        kind, n = collective_kind(cpu[g].name), numel(tensor_dims(_dims(cpu[g])))
        while first < len(c10d) and c10d[first] in used:
            first += 1
        for c in c10d[first:]:
            if cpu[c].ts > cpu[g].ts:
                break
            if c not in used and _compatible(cpu[c], kind, n):
                used.add(c)
                out[g] = c
                break
    return out


def thread_groups(
    cpu: list[CpuRange], matches: dict[int, int], rank: int, pgs: tuple[ProcessGroup, ...]
) -> dict[Any, ProcessGroup]:
    """Process group of each gloo worker thread (tid), where it can be told.

    A thread serves one process group. It is anchored when one of its collectives has a
    group size (from the c10d dims) that only one of this rank's groups has. Threads
    left over, created after every anchored one (tids grow in creation order, and groups
    are created in pg_config order), go to the one later group with no anchored thread.
    """
    mine = [pg for pg in pgs if not pg.ranks or rank in pg.ranks]
    threads = sorted({r.tid for r in cpu if r.name.startswith("gloo:")}, key=_tid_key)
    if len(mine) == 1:
        return {t: mine[0] for t in threads}
    out: dict[Any, ProcessGroup] = {}
    for g, c in matches.items():
        size = c10d_sizes(cpu[c].name, _dims(cpu[c]))[1]
        fits = [pg for pg in mine if pg.size == size]
        if size and len(fits) == 1:
            out.setdefault(cpu[g].tid, fits[0])
    if not out:
        return out
    last = max(mine.index(pg) for pg in out.values())
    later = [pg for pg in mine[last + 1 :] if pg not in out.values()]
    top = max((t for t in out), key=_tid_key)
    for t in threads:
        if t not in out and len(later) == 1 and _tid_key(t) > _tid_key(top):
            out[t] = later[0]
    return out


def _tid_key(tid: Any) -> tuple[int, str]:
    return (int(tid), "") if isinstance(tid, int) or str(tid).isdigit() else (1 << 62, str(tid))
