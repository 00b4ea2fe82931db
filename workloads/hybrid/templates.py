"""Pass templates: a pipeline stage emits each distinct pass once and copies it after.

Why: a stage's text holds hundreds of passes (warm-up, the steady units' p·v pairs,
cool-down) but only a few distinct ones: one per (direction, model chunk). Emitting a
pass walks the whole block emitter (shapes, kernels, collectives) per op; a copy only
moves dependencies. The copy is exact when the pass's ops depend on nothing before it
but the compute stream's last op at its start (`_last_compute`, which every first op
of a pass names) and the emitter carries no state from pass to pass that changes what a
pass emits. The first holds by construction and is checked when a template is
recorded; the second is why templates are only used without sharding (its gathers,
prefetches and resident units), without context-parallel attention, and on passes
other than the last microbatch's (whose backward reduces the gradients); Megatron's
bucket state (parameter waits, launched reductions) is part of the template's key.
tests/test_pipeline_compression.py builds programs with and without templates and
compares them op by op.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

from workloads.ops import Op, WaitOp

if TYPE_CHECKING:
    from workloads.hybrid.program import StageEmitter
    from workloads.hybrid.schedule import Pass

_OUTSIDE = -1  # a dependency on the compute stream's last op before the pass
USE_TEMPLATES = True  # off: every pass emitted (what the tests compare templates with)


@dataclass(frozen=True)
class _OpTemplate:
    """One op of a template: its constructor arguments, dependencies (and a wait's
    target) relative to the pass start, or _OUTSIDE."""

    op: Op
    make: Callable[..., Op]  # the op's class
    args: tuple[object, ...]
    deps_at: int
    deps: tuple[int, ...]
    target_at: int  # -1: not a wait
    target: int


@dataclass(frozen=True)
class _Template:
    ops: tuple[_OpTemplate, ...]
    last_compute: int | None  # relative to the pass start; _OUTSIDE: unchanged
    phase: str


_FIELDS: dict[type, tuple[str, ...]] = {}


def _field_names(t: type) -> tuple[str, ...]:
    got = _FIELDS.get(t)
    if got is None:
        got = _FIELDS[t] = tuple(f.name for f in fields(t))
    return got


class PassTemplates:
    """Records each distinct pass of one stage emitter and copies it on repeat."""

    def __init__(self, e: StageEmitter):
        self.e = e
        # sharded gathers/prefetches and context-parallel exchanges carry state across
        # passes that no key here captures: emit every pass there
        self.enabled = USE_TEMPLATES and e.sharder is None and e.cp_attention is None
        self.templates: dict[tuple[object, ...], _Template | None] = {}

    def _key(self, ps: Pass) -> tuple[object, ...] | None:
        e = self.e
        if not self.enabled or ps.mb == e.last_index:
            return None
        buckets = tuple(
            (len(bk._param_wait), len(bk._launched), len(bk._pending)) for bk in e.buckets.values()
        )
        return (ps.kind, ps.chunk, e.b._last_compute is None, buckets)

    def emit(self, ps: Pass) -> None:
        """Emit pass `ps` (a copy of its template when one is recorded)."""
        e = self.e
        key = self._key(ps)
        got = self.templates.get(key) if key is not None else None
        if got is not None:
            self._copy(got)
            e._enter(ps)
            return
        start = len(e.b.ops)
        before = e.b._last_compute
        if ps.kind == "F":
            e.forward_pass(ps)
        else:
            e.backward_pass(ps)
        if key is not None and key not in self.templates:
            self.templates[key] = _record(e, start, before)

    def _copy(self, t: _Template) -> None:
        b = self.e.b
        start = len(b.ops)
        lc = b._last_compute
        out = b.ops
        for x in t.ops:
            if not x.deps and x.target_at < 0:
                out.append(x.op)
                continue
            args = list(x.args)
            if x.deps:
                args[x.deps_at] = tuple(lc if d == _OUTSIDE else start + d for d in x.deps)
            if x.target_at >= 0:
                args[x.target_at] = lc if x.target == _OUTSIDE else start + x.target
            out.append(x.make(*args))
        if t.last_compute != _OUTSIDE:
            b._last_compute = None if t.last_compute is None else start + t.last_compute
        b.phase = t.phase


def _record(e: StageEmitter, start: int, before: int | None) -> _Template | None:
    """The template of ops[start:], or None when an op depends on anything before the
    pass other than the compute stream's last op at its start."""

    def rel(d: int) -> int | None:
        if d >= start:
            return d - start
        return _OUTSIDE if d == before else None

    ops: list[_OpTemplate] = []
    for op in e.b.ops[start:]:
        names = _field_names(type(op))
        deps = tuple(rel(d) for d in op.deps)
        target_at, target = -1, 0
        if isinstance(op, WaitOp):
            t = rel(op.target)
            if t is None:
                return None
            target_at, target = names.index("target"), t
        if any(d is None for d in deps):
            return None
        args = tuple(getattr(op, n) for n in names)
        ops.append(_OpTemplate(op, type(op), args, names.index("deps"), deps, target_at, target))  # type: ignore[arg-type]
    lc = e.b._last_compute
    last = _OUTSIDE if lc == before else (None if lc is None else lc - start)
    return _Template(tuple(ops), last, e.b.phase)
